#!/usr/bin/env bash
# scripts/check-links.py on two fixture trees (tests/docs/links/): one where every link resolves
# (exit 0, nothing printed), one with six broken links (exit 1, each named with file and line).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
checker=$here/../../scripts/check-links.py
fail=0

out=$(python3 "$checker" "$here/links/good" 2>/dev/null); rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: the good tree: exit $rc (want 0), output:"; echo "$out"; fail=1
fi

out=$(python3 "$checker" "$here/links/broken" 2>/dev/null); rc=$?
want=$(cat <<'W'
README.md:3: docs/missing.md: no such file
README.md:4: docs/a.md#no-such-heading: no heading '#no-such-heading' in docs/a.md
README.md:5: #nowhere: no heading '#nowhere' in README.md
README.md:6: docs/a.md#Live-Migration: no heading '#Live-Migration' in docs/a.md
docs/a.md:5: b.md: no such file
README.md:7: docs/gone.md: no such file
W
)
if [ "$rc" -ne 1 ]; then echo "FAIL: the broken tree: exit $rc (want 1)"; fail=1; fi
if [ "$out" != "$want" ]; then
  echo "FAIL: the broken tree's report differs"; echo "--- want"; echo "$want"; echo "--- got"; echo "$out"; fail=1
fi
[ "$fail" -eq 0 ] && echo "check-links: the good tree passes, the broken tree's six links are named"
exit "$fail"

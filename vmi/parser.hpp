#pragma once
// Reading a VirtualMachineInstance manifest (YAML or JSON; a single document, or the first
// VirtualMachineInstance of a multi-document file) into the typed model of vmi.hpp.
// The parser checks form (types, quantities, enums); what the VMI means for a hypervisor is
// validator.hpp's job. Unknown fields are ignored with a debug log line, as the Kubernetes API
// does for clients.
#include <string>
#include <string_view>

#include "vmi/vmi.hpp"
#include "common/error.hpp"

namespace chl::vmi {

struct ParseOutcome {
  Vmi vmi;              // best effort: fields with problems are left at their defaults
  Violations problems;  // every problem found, each with its field path
  bool fatal = false;   // the text is not a VMI at all (syntax error, wrong kind/apiVersion)
};

// Parse `text`. Syntax errors are reported with line and column.
ParseOutcome parse_vmi(std::string_view text);

// Read a manifest file ("-" = stdin). Fails with "reading FILE: <errno text>".
common::Result<std::string> read_manifest(const std::string& path);

}  // namespace chl::vmi

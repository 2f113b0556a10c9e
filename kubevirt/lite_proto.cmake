# Writes the protobuf-lite variant of one of our .proto files (cmake -P, from CMakeLists.txt):
# the same messages, fields, numbers and types, so the same bytes on the wire, with
# `option optimize_for = LITE_RUNTIME` and the package renamed kubevirt.* → kubevirt_lite.*
# (a C++ namespace of its own, so that a test may link both variants).
#   cmake -DIN=<file.proto> -DOUT=<file.proto> -P lite_proto.cmake
file(READ ${IN} text)
string(REGEX REPLACE "\npackage kubevirt\\." "\npackage kubevirt_lite." text "${text}")
if(NOT text MATCHES "\npackage kubevirt_lite\\.")
  message(FATAL_ERROR "${IN}: no `package kubevirt.` line")
endif()
file(WRITE ${OUT}.tmp "${text}\noption optimize_for = LITE_RUNTIME;\n")
file(RENAME ${OUT}.tmp ${OUT})

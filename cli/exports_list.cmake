# cmake -DNM=nm -DMODULES="a.so;b.so" -DOUT=file -P exports_list.cmake
#
# Writes the linker's --dynamic-list for ch-launcher: every symbol the modules
# (libchl-libvirt.so, libchl-network.so) have in their dynamic symbol tables, defined or not.
# The executable exports exactly those of them it defines:
#   - undefined in a module: the launcher's code the module calls (logging, Error, the event
#     tracker, the DHCP servers…), bound to the executable's copy at dlopen;
#   - defined in a module as well (inline functions, template instantiations, typeinfo,
#     guard variables of function-local statics): the executable's copy wins, as it did with
#     -rdynamic, so there is one of each (one logger, one of everything).
# Everything else stays local to the executable: a small dynamic symbol table (fewer pages
# touched by every symbol lookup at start-up), and --gc-sections may drop code no one calls.
set(names "")
foreach(m IN LISTS MODULES)
  execute_process(COMMAND ${NM} -D --format=posix ${m} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} -D ${m} failed (${rc})")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # "name TYPE [value size]"; versioned undefined symbols read "name@VERSION".
    if(line MATCHES "^([^ @:]+)(@[^ ]*)? [A-Za-z]")
      list(APPEND names "${CMAKE_MATCH_1}")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES names)
list(SORT names)
list(LENGTH names n)
if(n LESS 100)
  message(FATAL_ERROR "only ${n} dynamic symbols in ${MODULES}: not what the modules should hold")
endif()
set(text "{\n")
foreach(s IN LISTS names)
  string(APPEND text "  \"${s}\";\n")
endforeach()
string(APPEND text "};\n")
file(WRITE ${OUT}.tmp "${text}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)

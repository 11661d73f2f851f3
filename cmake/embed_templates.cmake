# Concatenates the kernel templates (in dependency order) into one C++ source holding a string
# literal, so the library carries its own kernels and specialises them through NVRTC at run time.
# Inputs: OUTPUT, TEMPLATES (;-separated list of files).
set(body "")
foreach(file ${TEMPLATES})
  file(READ ${file} text)
  string(REPLACE "#pragma once" "" text "${text}")
  get_filename_component(name ${file} NAME)
  string(APPEND body "// ---- ${name}\n${text}\n")
endforeach()
string(FIND "${body}" ")dfgnn_kernels\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "kernel templates contain the raw-string delimiter")
endif()
file(WRITE ${OUTPUT}.tmp "// Generated from kernel_templates/ by cmake/embed_templates.cmake. Do not edit.\n"
  "namespace dfgnn {\nextern const char kKernelSource[];\n"
  "const char kKernelSource[] = R\"dfgnn_kernels(${body})dfgnn_kernels\";\n}\n")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)

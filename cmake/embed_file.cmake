# Writes a C++ source defining `const char dfgnn::SYMBOL[]` holding the text of one file, so the
# library carries data it reads at run time (the fitted default rule). Inputs: INPUT, OUTPUT,
# SYMBOL. The output is rewritten only when its content changes.
file(READ ${INPUT} text)
string(FIND "${text}" ")dfgnn_file\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter")
endif()
file(RELATIVE_PATH name ${CMAKE_CURRENT_LIST_DIR}/.. ${INPUT})
file(WRITE ${OUTPUT}.tmp "// Generated from ${name} by cmake/embed_file.cmake. Do not edit.\n"
  "namespace dfgnn {\nextern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"dfgnn_file(${text})dfgnn_file\";\n}\n")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)

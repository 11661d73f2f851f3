# Installs the built dfgnn into a scratch prefix, then configures, builds and runs the consumer.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# Every installed executable starts from the installed tree alone: no LD_LIBRARY_PATH, no build
# directory (the RUNPATH $ORIGIN/../<libdir> finds libdfgnn).
file(GLOB tools ${WORK_DIR}/prefix/${CMAKE_INSTALL_BINDIR}/*)
list(LENGTH tools count)
if(count LESS 3)
  message(FATAL_ERROR "expected the installed tools in ${WORK_DIR}/prefix/${CMAKE_INSTALL_BINDIR}, found: ${tools}")
endif()
foreach(tool IN LISTS tools)
  execute_process(COMMAND env -i PATH=/usr/bin:/bin ${tool} --help RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "--help")
    message(FATAL_ERROR "installed ${tool} --help failed (exit ${rc}) with a clean environment:\n${out}\n${err}")
  endif()
  message(STATUS "installed ${tool} --help: ok")
endforeach()

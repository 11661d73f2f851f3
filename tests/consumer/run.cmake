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

# The shipped tuning databases are found beside the installed tools and library: a damaged one put
# into <prefix>/<datadir>/dfgnn/tuning is reported by dfgnn-db layers (the tool's own code) and by
# dfgnn-tune --explain (libdfgnn's), each in one line, and changes nothing else.
set(shipped ${WORK_DIR}/prefix/${CMAKE_INSTALL_DATADIR}/dfgnn/tuning)
file(WRITE ${shipped}/zz-damaged.db "this is not an SQLite database, but long enough to be read as one ............")
set(bin ${WORK_DIR}/prefix/${CMAKE_INSTALL_BINDIR})
execute_process(COMMAND env -i PATH=/usr/bin:/bin ${bin}/dfgnn-db --db ${WORK_DIR}/none.db layers
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT out MATCHES "shipped databases: installed in [^\n]*/dfgnn/tuning"
   OR NOT out MATCHES "shipped  [^\n]*/zz-damaged.db: UNUSABLE")
  message(FATAL_ERROR "installed dfgnn-db layers did not find the shipped directory (exit ${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND env -i PATH=/usr/bin:/bin ${bin}/dfgnn-tune --explain --rmat 6 --db ${WORK_DIR}/explain.db
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "shipped tuning database skipped[^\n]*zz-damaged.db" warnings "${err}")
list(LENGTH warnings count)
if(NOT rc EQUAL 0 OR NOT count EQUAL 1)
  message(FATAL_ERROR "installed libdfgnn did not report the damaged shipped database once (exit ${rc}):\n${out}\n${err}")
endif()
file(REMOVE ${shipped}/zz-damaged.db)
message(STATUS "shipped databases found beside the installed tools and library: ok")

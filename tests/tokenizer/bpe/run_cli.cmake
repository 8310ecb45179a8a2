# Runs one fp8rl command for a CTest case and checks its exit status and output.
#   cmake -DCOMMAND="fp8rl@@tokenize@@..." [-DEXPECT_FAIL=ON] [-DSTDOUT=exact text]
#         [-DOUTPUT_REGEX=regex matched against stdout+stderr] [-DWORKDIR=dir] -P run_cli.cmake
string(REPLACE "@@" ";" command "${COMMAND}")
execute_process(COMMAND ${command} WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE status
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
# A death by a signal (a crash, a sanitizer's abort) is a failure even where an error is expected:
# RESULT_VARIABLE then holds a description ("Child aborted"), not a number.
if(NOT status MATCHES "^[0-9]+$")
  message(FATAL_ERROR "killed: ${status}\nstdout: ${out}\nstderr: ${err}")
endif()
if(EXPECT_FAIL)
  if(status EQUAL 0)
    message(FATAL_ERROR "expected a non-zero exit status, got 0\nstdout: ${out}\nstderr: ${err}")
  endif()
elseif(NOT status EQUAL 0)
  message(FATAL_ERROR "exit status ${status}\nstdout: ${out}\nstderr: ${err}")
endif()
if(DEFINED STDOUT AND NOT out STREQUAL STDOUT)
  message(FATAL_ERROR "stdout differs\nexpected: [${STDOUT}]\nactual:   [${out}]")
endif()
if(DEFINED OUTPUT_REGEX AND NOT "${out}${err}" MATCHES "${OUTPUT_REGEX}")
  message(FATAL_ERROR "output does not match '${OUTPUT_REGEX}'\nstdout: ${out}\nstderr: ${err}")
endif()

# Runs `conan create` of frugal with its test_package, offline: no remote at all, Eigen and xxHash
# from the system through the wrapper recipes beside this file.
#   -DROOT=<frugal source>  -DWORK=<scratch folder>  -DTOOLS=<folder for the conan venv>
#   -DWITH_CUDA=ON|OFF      -DPYTHON=<python3>
# Conan comes from, in order: a venv already in TOOLS, a Conan 2 on PATH, or a fresh venv in TOOLS
# (pip, from PyPI). When none works it prints "frugal-conan-skip:" and the ctest is reported as
# skipped, except under CI=true, where a missing Conan is a failure.
cmake_minimum_required(VERSION 3.25)

function(skip_or_fail reason)
  if("$ENV{CI}" STREQUAL "true")
    message(FATAL_ERROR "conan is needed in CI: ${reason}")
  endif()
  message(NOTICE "frugal-conan-skip: ${reason}")
  # A script cannot exit early from a function; the caller returns.
  set(skipped TRUE PARENT_SCOPE)
endfunction()

function(conan_version exe out)
  execute_process(COMMAND "${exe}" --version OUTPUT_VARIABLE v RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND v MATCHES "Conan version (2\\.[0-9.]+)")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

function(run)
  string(JOIN " " line ${ARGN})
  message(STATUS "+ ${line}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${line}")
  endif()
endfunction()

# One venv for every conan test of this build; the lock keeps two ctest jobs from racing to make it.
set(venv "${TOOLS}/conan-venv")
file(MAKE_DIRECTORY "${TOOLS}")
file(LOCK "${TOOLS}/conan-venv.lock" GUARD PROCESS TIMEOUT 300)
set(conan "${venv}/bin/conan")
conan_version("${conan}" version)
if(NOT version)
  find_program(path_conan conan)
  if(path_conan)
    conan_version("${path_conan}" version)
    if(version)
      set(conan "${path_conan}")
    endif()
  endif()
endif()
if(NOT version)
  message(STATUS "installing conan into ${venv}")
  execute_process(COMMAND "${PYTHON}" -m venv "${venv}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0)
    execute_process(COMMAND "${venv}/bin/python" -m pip install --disable-pip-version-check -q "conan>=2.0,<3"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  endif()
  set(conan "${venv}/bin/conan")
  conan_version("${conan}" version)
  if(NOT version)
    file(REMOVE_RECURSE "${venv}")
    skip_or_fail("conan is not installed and `${PYTHON} -m venv` + `pip install conan` failed: ${out}")
    if(skipped)
      return()
    endif()
  endif()
endif()
file(LOCK "${TOOLS}/conan-venv.lock" RELEASE)
message(STATUS "using Conan ${version}: ${conan}")

# A private, fresh CONAN_HOME: nothing global is read or written, and no remote is configured, so any
# attempt to reach Conan Center fails loudly instead of quietly downloading.
set(ENV{CONAN_HOME} "${WORK}/conan-home")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
run("${conan}" profile detect --force)
run("${conan}" remote remove "*")
set(TEST_FOLDER "${WORK}/test_package")
configure_file("${CMAKE_CURRENT_LIST_DIR}/offline.profile.in" "$ENV{CONAN_HOME}/profiles/frugal-offline" @ONLY)

run("${conan}" export "${CMAKE_CURRENT_LIST_DIR}/eigen")
run("${conan}" export "${CMAKE_CURRENT_LIST_DIR}/xxhash")
set(options -o "frugal/*:with_cuda=False")
if(WITH_CUDA)
  set(options -o "frugal/*:with_cuda=True")
endif()
run("${conan}" create "${ROOT}" -pr:a frugal-offline --build=missing ${options})

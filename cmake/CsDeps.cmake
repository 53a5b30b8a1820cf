# Third-party dependencies, all Debian packages (scripts/bootstrap.sh installs them).
find_package(PkgConfig REQUIRED)
# The file-work thread pool (src/base/base_pool.c); in the C library itself on Debian 12.
find_package(Threads REQUIRED)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
# The runner wire's fast JSON path (src/base/base_json_fast.c): yajl lexes, jansson's tree.
pkg_check_modules(YAJL REQUIRED IMPORTED_TARGET yajl)
pkg_check_modules(CRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# TLS 1.3 of the remote runner (src/runner/runner_tls.c, docs/scale-out.md).
pkg_check_modules(SSL REQUIRED IMPORTED_TARGET libssl)
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(SQLITE REQUIRED IMPORTED_TARGET sqlite3)
if(BUILD_TESTING)
  # Debian's cmocka ships no AddCMockaTest.cmake; pkg-config is enough.
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

find_program(RAGEL ragel)
if(NOT RAGEL)
  message(FATAL_ERROR "ragel not found: run scripts/bootstrap.sh (apt-get install ragel)")
endif()

# The generator runs on Debian's python3 with Debian's python3-jsonschema, never a pyenv one.
set(CS_PYTHON /usr/bin/python3 CACHE FILEPATH "Python used by the schema generator")
execute_process(COMMAND ${CS_PYTHON} -c "import jsonschema"
                RESULT_VARIABLE _cs_py_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT _cs_py_rc EQUAL 0)
  message(FATAL_ERROR "${CS_PYTHON} cannot import jsonschema: apt-get install python3-jsonschema")
endif()

# cs_ragel(<out-var> <file.rl>): generate <file>.c into the build tree with ragel -G2 and
# exempt it from the warnings its goto-driven output trips.
function(cs_ragel out_var rl)
  get_filename_component(_name ${rl} NAME_WE)
  set(_out ${CMAKE_CURRENT_BINARY_DIR}/${_name}.c)
  add_custom_command(OUTPUT ${_out}
    COMMAND ${RAGEL} -G2 -o ${_out} ${CMAKE_CURRENT_SOURCE_DIR}/${rl}
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${rl}
    COMMENT "ragel ${rl}" VERBATIM)
  set_source_files_properties(${_out} PROPERTIES COMPILE_OPTIONS
    "-Wno-implicit-fallthrough;-Wno-sign-conversion;-Wno-unused-const-variable;-Wno-conversion;-Wno-unused-variable")
  set(${out_var} ${_out} PARENT_SCOPE)
endfunction()

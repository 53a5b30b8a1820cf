# Schema compilation. gen/csgen.py validates every schema under schema/ against the 2020-12
# meta-schema and emits, into ${CS_GEN_DIR}, deterministic C (types, descriptor tables, the error
# catalogue, bundled schema texts). Nothing it writes is checked in.
set(CS_GEN_DIR ${CMAKE_BINARY_DIR}/gen)
set(CS_GENERATOR ${CMAKE_SOURCE_DIR}/gen/csgen.py)
file(GLOB_RECURSE CS_SCHEMAS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/schema/*.json)
file(GLOB CS_GEN_PY CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/gen/*.py)

# The list of top-level decoders (one per schema file) is needed at configure time to declare a
# fuzz harness per decoder; re-running configure when a schema changes keeps it current.
execute_process(
  COMMAND ${CS_PYTHON} ${CS_GENERATOR} --schema-dir ${CMAKE_SOURCE_DIR}/schema --list
  OUTPUT_VARIABLE _cs_types RESULT_VARIABLE _cs_rc ERROR_VARIABLE _cs_err)
if(NOT _cs_rc EQUAL 0)
  message(FATAL_ERROR "schema generator failed:\n${_cs_err}")
endif()
string(REPLACE "\n" ";" CS_TOPLEVEL_TYPES "${_cs_types}")
list(FILTER CS_TOPLEVEL_TYPES EXCLUDE REGEX "^$")

set(CS_GEN_OUTPUTS ${CS_GEN_DIR}/csw.h ${CS_GEN_DIR}/csw_tables.c)
add_custom_command(OUTPUT ${CS_GEN_OUTPUTS}
  COMMAND ${CS_PYTHON} ${CS_GENERATOR} --schema-dir ${CMAKE_SOURCE_DIR}/schema --out ${CS_GEN_DIR}
  DEPENDS ${CS_SCHEMAS} ${CS_GEN_PY}
  COMMENT "csgen: schema/ -> ${CS_GEN_DIR}" VERBATIM)
add_custom_target(cs_generate DEPENDS ${CS_GEN_OUTPUTS})

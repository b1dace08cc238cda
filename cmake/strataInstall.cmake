# cmake --install <build> --prefix P installs (components: runtime = the shared library, dev = the
# rest; the .deb splits along them):
#   P/lib/libstrata.so.0[.1.0]          the malloc replacement (SONAME libstrata.so.0)
#   P/lib/libstrata{,_api,_pool,_gpu}.a  static: override, strata_* only, pools, GPU resources
#   P/include/strata/                   the public headers
#   P/lib/cmake/strata/                 find_package(strata): strata::strata (shared, replaces
#                                       malloc), strata::static, strata::api, strata::pool, strata::gpu
#   P/lib/pkgconfig/strata.pc           pkg-config --cflags --libs strata (the shared library)
#   P/lib/libstrata-secure.so           the hardened build (docs/security.md), preloaded the same way
#   P/lib/libstrata_torch.so, P/lib/strata/python/strata_gpu   the PyTorch/CuPy plug-in
# (lib is CMAKE_INSTALL_LIBDIR: lib/<multiarch> when configured with CMAKE_INSTALL_PREFIX=/usr on
# Debian.)  The sanitizer builds have no override libraries and install the rest.
include(CMakePackageConfigHelpers)

set(strata_install_targets strata_api strata_pool strata_gpu)
if(STRATA_OVERRIDE)
  list(PREPEND strata_install_targets strata_shared strata_static)
endif()
set(strata_export_names strata_shared=strata strata_static=static strata_api=api
                        strata_pool=pool strata_gpu=gpu)
foreach(pair ${strata_export_names})
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 target)
  list(GET pair 1 name)
  if(NOT TARGET ${target})
    continue()
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  # Targets defined elsewhere name the source tree's include/ directly: that path is for the
  # build tree only; installed consumers get <prefix>/include.
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(fixed "")
  foreach(dir ${dirs})
    if(dir MATCHES "^\\$<")
      list(APPEND fixed "${dir}")
    else()
      list(APPEND fixed "$<BUILD_INTERFACE:${dir}>")
    endif()
  endforeach()
  list(APPEND fixed "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  list(REMOVE_DUPLICATES fixed)
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
endforeach()

set(strata_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(TARGETS ${strata_install_targets} EXPORT strataTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/strata DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev)
# The hardened preload library (docs/security.md), beside the plain one.
if(TARGET strata_secure_shared)
  install(TARGETS strata_secure_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()

# The PyTorch/CuPy plug-in (docs/gpu.md): the library torch loads, and the Python module over it,
# which finds the library two levels up (<libdir>/strata/python/strata_gpu).
if(TARGET strata_torch)
  install(TARGETS strata_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/strata_gpu DESTINATION ${CMAKE_INSTALL_LIBDIR}/strata/python
          COMPONENT runtime PATTERN __pycache__ EXCLUDE)
endif()
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${strata_cmake_dir} COMPONENT dev)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/strataConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION ${strata_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${strata_cmake_dir} COMPONENT dev)

# strata.pc names the prefix it is installed under, which `cmake --install --prefix` decides only
# at install time: it is written then (cmake/strataPkgConfig.cmake).
if(STRATA_OVERRIDE)
  install(CODE "
    set(strata_pc_template [[${CMAKE_CURRENT_LIST_DIR}/strata.pc.in]])
    set(strata_pc_staging [[${PROJECT_BINARY_DIR}/pkgconfig]])
    set(STRATA_PC_LIBDIR [[${CMAKE_INSTALL_LIBDIR}]])
    set(STRATA_PC_INCLUDEDIR [[${CMAKE_INSTALL_INCLUDEDIR}]])
    set(STRATA_PC_VERSION [[${PROJECT_VERSION}]])
    include([[${CMAKE_CURRENT_LIST_DIR}/strataPkgConfig.cmake]])" COMPONENT dev)
endif()

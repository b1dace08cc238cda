# Runs at install time (from cmake_install.cmake): writes strata.pc for the prefix being installed
# to.  Set by the caller: strata_pc_template, strata_pc_staging, STRATA_PC_LIBDIR,
# STRATA_PC_INCLUDEDIR, STRATA_PC_VERSION; CMAKE_INSTALL_PREFIX is the install's --prefix.
#
# A relative --prefix (cmake --install build --prefix out) installs under the current directory:
# the file names that directory in full, or pkg-config would resolve it against its user's.
get_filename_component(STRATA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}" ABSOLUTE)
# pkg-config splits Cflags and Libs at blanks: a path with spaces is written escaped ("\ "), which
# pkg-config passes on and shells (make's recipes, eval), Meson and CMake's FindPkgConfig read
# as one word.
string(REPLACE " " "\\ " STRATA_PC_PREFIX "${STRATA_PC_PREFIX}")
# CMAKE_INSTALL_LIBDIR and _INCLUDEDIR may be absolute (GNUInstallDirs allows it; Nix and Guix
# set them so): then they stand alone, not under ${prefix}, and so does the file's destination.
set(strata_pc_libdir_full "${CMAKE_INSTALL_PREFIX}/${STRATA_PC_LIBDIR}")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${STRATA_PC_${dir}}")
    string(REPLACE " " "\\ " STRATA_PC_${dir}_VALUE "${STRATA_PC_${dir}}")
    if(dir STREQUAL "LIBDIR")
      set(strata_pc_libdir_full "${STRATA_PC_LIBDIR}")
    endif()
  else()
    string(REPLACE " " "\\ " STRATA_PC_${dir}_VALUE "\${prefix}/${STRATA_PC_${dir}}")
  endif()
endforeach()
configure_file(${strata_pc_template} ${strata_pc_staging}/strata.pc @ONLY)
file(INSTALL DESTINATION "${strata_pc_libdir_full}/pkgconfig" TYPE FILE
     FILES ${strata_pc_staging}/strata.pc)

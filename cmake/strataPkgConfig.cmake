# Runs at install time (from cmake_install.cmake): writes strata.pc for the prefix being installed
# to.  Set by the caller: strata_pc_template, strata_pc_staging, STRATA_PC_LIBDIR,
# STRATA_PC_INCLUDEDIR, STRATA_PC_VERSION; CMAKE_INSTALL_PREFIX is the install's --prefix.
set(STRATA_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
configure_file(${strata_pc_template} ${strata_pc_staging}/strata.pc @ONLY)
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${STRATA_PC_LIBDIR}/pkgconfig" TYPE FILE
     FILES ${strata_pc_staging}/strata.pc)

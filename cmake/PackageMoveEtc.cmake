# CPACK_PRE_BUILD_SCRIPTS: moves <staging>/<component>/usr/etc to
# <staging>/<component>/etc, where Debian keeps configuration (conffiles).
file(GLOB etc_dirs LIST_DIRECTORIES true "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*/usr/etc"
  "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/usr/etc")
foreach(dir IN LISTS etc_dirs)
  get_filename_component(usr "${dir}" DIRECTORY)
  get_filename_component(root "${usr}" DIRECTORY)
  file(RENAME "${dir}" "${root}/etc")
endforeach()

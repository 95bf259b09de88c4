# Debian packages with CPack (`cpack -G DEB` in the build directory;
# tests/package_test.sh checks them):
#   collectived           the daemon, collectivectl, the units, the config (a
#                         conffile in /etc); its postinst creates the
#                         `collectived` system group and user and runs the
#                         systemd maintainer steps (deploy/debian/)
#   libcollectived-client the client library
#   libcollectived-nccl   the NCCL API library and its libnccl.so.2 alias
#   libcollectived-dev    headers (nccl.h too), the .so link, the CMake package
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME collectived)
set(CPACK_PACKAGE_VENDOR "collectived")
set(CPACK_PACKAGE_CONTACT "collectived maintainers <collectived@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Per-node collective runtime daemon (all-reduce, all-gather) for GPU and host jobs")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# Shared-library dependencies from dpkg-shlibdeps; our own libraries are
# found in the build tree and become the component dependencies below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_STRIP_FILES ON)  # debug info stays in the build tree
set(CPACK_COMPONENTS_ALL collectived libcollectived-client libcollectived-nccl libcollectived-dev)
if(NOT TARGET collectived_nccl)
  list(REMOVE_ITEM CPACK_COMPONENTS_ALL libcollectived-nccl)
endif()

set(CPACK_DEBIAN_COLLECTIVED_PACKAGE_NAME collectived)
set(CPACK_DEBIAN_COLLECTIVED_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_COLLECTIVED_DESCRIPTION "collectived daemon, collectivectl and the systemd unit")
set(CPACK_DEBIAN_COLLECTIVED_PACKAGE_CONTROL_EXTRA
  ${CMAKE_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
  ${CMAKE_SOURCE_DIR}/deploy/debian/postrm ${CMAKE_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_COLLECTIVED_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_LIBCOLLECTIVED-CLIENT_PACKAGE_NAME libcollectived-client)
set(CPACK_DEBIAN_LIBCOLLECTIVED-NCCL_PACKAGE_NAME libcollectived-nccl)
set(CPACK_DEBIAN_LIBCOLLECTIVED-DEV_PACKAGE_NAME libcollectived-dev)
set(CPACK_DEBIAN_LIBCOLLECTIVED-DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_LIBCOLLECTIVED-NCCL_DEPENDS libcollectived-client)
set(CPACK_COMPONENT_LIBCOLLECTIVED-DEV_DEPENDS libcollectived-client)
set(CPACK_COMPONENT_COLLECTIVED_DESCRIPTION "the daemon, collectivectl, the systemd units and /etc/collectived")
set(CPACK_COMPONENT_LIBCOLLECTIVED-CLIENT_DESCRIPTION "collectived client library")
set(CPACK_COMPONENT_LIBCOLLECTIVED-NCCL_DESCRIPTION
  "NCCL API over collectived (LD_PRELOAD=libcollectived_nccl.so, soname libnccl.so.2)")
set(CPACK_COMPONENT_LIBCOLLECTIVED-DEV_DESCRIPTION "collectived headers and CMake package (find_package(collectived))")
# The config is installed under the prefix (etc/collectived, so that
# `cmake --install --prefix` stays inside its prefix); in the package it belongs in /etc.
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_SOURCE_DIR}/cmake/PackageMoveEtc.cmake)
include(CPack)

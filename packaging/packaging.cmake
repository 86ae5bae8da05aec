# Debian packages (scripts/package.sh builds them): fedmesh-node, fedmesh-aggregator and
# fedmesh-tools, each with its Debian runtime dependencies found by dpkg-shlibdeps, the
# systemd template units (packaging/systemd/) and a postinst that creates the unprivileged
# user `fedmesh` they run as. Included at the end of the top-level CMakeLists.txt.
install(TARGETS fedmesh-node RUNTIME DESTINATION bin COMPONENT node)
install(FILES packaging/systemd/fedmesh-node@.service DESTINATION lib/systemd/system COMPONENT node)
install(FILES README.md docs/config.md docs/external-trainer.md docs/monitoring.md
        DESTINATION share/doc/fedmesh-node COMPONENT node)
install(TARGETS fedmesh-aggregator RUNTIME DESTINATION bin COMPONENT aggregator)
install(FILES packaging/systemd/fedmesh-aggregator@.service DESTINATION lib/systemd/system COMPONENT aggregator)
install(FILES README.md docs/config.md docs/security.md docs/monitoring.md
        DESTINATION share/doc/fedmesh-aggregator COMPONENT aggregator)
install(TARGETS fedmesh-keys fedmesh-provision fedmesh-admin fedmesh-model fedmesh-psi fedmesh-sim RUNTIME DESTINATION bin COMPONENT tools)
install(FILES README.md docs/provisioning.md DESTINATION share/doc/fedmesh-tools COMPONENT tools)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fedmesh)
set(CPACK_PACKAGE_VENDOR fedmesh)
set(CPACK_PACKAGE_VERSION 0.1.0)
set(CPACK_PACKAGE_CONTACT "fedmesh maintainers <fedmesh@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL node aggregator tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/fedmesh")
set(CPACK_DEBIAN_NODE_PACKAGE_NAME fedmesh-node)
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_NAME fedmesh-aggregator)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME fedmesh-tools)
set(CPACK_DEBIAN_NODE_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_NODE_PACKAGE_SUGGESTS "fedmesh-tools, python3-numpy, python3-torch")
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_SUGGESTS "fedmesh-tools")
set(CPACK_COMPONENT_NODE_DESCRIPTION
    "fedmesh site node\n fedmesh-node trains next to a site's data and exchanges only model updates\n (CurveZMQ, secure aggregation, codecs), or hands training to the site's own script.")
set(CPACK_COMPONENT_AGGREGATOR_DESCRIPTION
    "fedmesh aggregator\n fedmesh-aggregator runs a federation's rounds: selection, robust and private\n aggregation, federated evaluation, a SQLite store and Prometheus metrics.")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
    "fedmesh tools\n fedmesh-keys, fedmesh-provision (startup kits), fedmesh-admin (admin control),\n fedmesh-model (ONNX export),\n fedmesh-psi (private set intersection) and fedmesh-sim (simulation).")
set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/postinst)
set(CPACK_DEBIAN_AGGREGATOR_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/postinst)
include(CPack)

#!/bin/sh
# Installs Debian's redis-server for the tests that use a real Redis, when it is missing
# and we may install (root with apt-get). Never fails the build: tests needing Redis
# skip with a clear reason when it is absent.
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -q redis-server >/dev/null 2>&1 || \
     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q redis-server >/dev/null 2>&1)) \
     || echo "note: could not install redis-server; Redis tests will skip"
    # Debian's package starts a system service; tests start their own servers on free ports.
    (service redis-server stop >/dev/null 2>&1 || true)
else
    echo "note: redis-server absent and not root; Redis tests will skip"
fi
exit 0

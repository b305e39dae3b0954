#!/bin/sh
# Installs Debian's redis-server (tests that use a real Redis) and redis-tools (redis-cli
# and redis-benchmark: the RESP front end's tests and benchmark) when missing and we may
# install (root with apt-get). Never fails the build: tests needing them skip with a
# clear reason when they are absent.
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -q redis-server redis-tools >/dev/null 2>&1 || \
     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q redis-server redis-tools >/dev/null 2>&1)) \
     || echo "note: could not install redis-server/redis-tools; Redis tests will skip"
    # Debian's package starts a system service; tests start their own servers on free ports.
    (service redis-server stop >/dev/null 2>&1 || true)
else
    echo "note: redis-server or redis-cli absent and not root; Redis tests will skip"
fi
exit 0

#!/usr/bin/env bash
# Installs Debian's PostgreSQL server binaries for the store tests (tests/postgres_server.py starts a throwaway
# server from them; the packaged cluster service is never started). Nothing to do where initdb and pg_ctl exist.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || { command -v initdb && command -v pg_ctl; } >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install_postgres: no PostgreSQL server binaries and cannot apt-get them here; the PostgreSQL tests will be" \
         "skipped (or fail, under EVOLVE_REQUIRE_POSTGRES=1)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# postgresql-common would create and start a cluster on install where a service manager runs: tell it not to
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/evolve-no-main-cluster.conf
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
echo "installed $(ls -d /usr/lib/postgresql/*/bin | head -1)"

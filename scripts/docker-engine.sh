#!/usr/bin/env bash
# Makes sure a Docker engine answers and `docker compose` (v2) is there, on a Debian machine run
# as root (CI, or this kind of build machine). Idempotent: on a machine that has both it only checks.
#   - the engine: Debian's docker.io if no docker daemon is installed; dockerd started in the
#     background (log: $TOOLQ_DOCKERD_LOG, default /var/log/toolq-dockerd.log) if none answers;
#   - compose v2: Debian's own docker-compose package (2.26, from trixie, the current stable; it
#     depends on libc6 only). Bookworm has only the Python compose 1.29. The package is fetched with
#     a private apt configuration, so the machine's own sources stay as they are.
set -euo pipefail

log="${TOOLQ_DOCKERD_LOG:-/var/log/toolq-dockerd.log}"

say() { echo "docker-engine: $*"; }

if ! command -v dockerd >/dev/null 2>&1; then
  say "installing Debian's docker.io"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  say "starting dockerd (log: $log)"
  nohup dockerd >"$log" 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not answer within 60 s; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
fi

if ! docker compose version >/dev/null 2>&1; then
  say "installing docker-compose v2 from Debian trixie"
  apt_dir="$(mktemp -d)"
  trap 'rm -rf "$apt_dir"' EXIT
  chmod 755 "$apt_dir"  # apt fetches as the _apt user
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  uri="$(sed -n 's/^URIs: *\(\S*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${uri:-http://deb.debian.org/debian} trixie main" \
    >"$apt_dir/sources.list"
  apt_opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$apt_dir" && apt-get "${apt_opts[@]}" download docker-compose >/dev/null)
  dpkg -i "$apt_dir"/docker-compose_*.deb >/dev/null
fi
say "$(docker version --format 'engine {{.Server.Version}}'), $(docker compose version)"

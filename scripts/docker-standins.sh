#!/usr/bin/env bash
# Stand-ins for the public base images, for a machine that cannot reach an image registry (CI,
# build machines behind a firewall). The Dockerfiles, docker-compose.yml and the tests name the
# standard images (python:3.11-slim, redis:7.4-alpine); where one of them is not in the local
# engine, this builds an image under the SAME name from Debian's packages: a `debootstrap
# --variant=minbase` bookworm root imported with `docker import`, plus Debian's python3 (with
# venv and pip, `python` on PATH) or redis-server. An image that is already there, pulled or
# built, is left alone. Needs root, debootstrap (installed if missing) and an answering engine.
#   bash scripts/docker-standins.sh            # the images the compose stack and the tests use
set -euo pipefail
# The images the Dockerfiles, docker-compose.yml and the tests' Redis (toolq/testing/images.py) name;
# tests/unit/test_deploy.py checks that they agree.
TOOLQ_PYTHON_IMAGE="python:3.11-slim"
TOOLQ_REDIS_IMAGE="redis:7.4-alpine"

say() { echo "docker-standins: $*"; }

have() { docker image inspect "$1" >/dev/null 2>&1; }

base="toolq-standin/debian:bookworm"  # our own name: never mistaken for a pulled image

need=()
for image in "$TOOLQ_PYTHON_IMAGE" "$TOOLQ_REDIS_IMAGE"; do
  have "$image" || need+=("$image")
done
if [ "${#need[@]}" -eq 0 ]; then
  say "present: $TOOLQ_PYTHON_IMAGE, $TOOLQ_REDIS_IMAGE"
  exit 0
fi

# The Debian mirror this machine's apt uses, so that builds on the stand-ins reach the same one.
mirror="$(sed -n 's/^URIs: *\(\S*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
mirror="${mirror:-$(sed -n 's/^deb \(\S*\/debian\) .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)}"
mirror="${mirror:-http://deb.debian.org/debian}"

# The build context: this machine's own certificate authorities (/usr/local/share/ca-certificates),
# so that a stand-in trusts what the machine trusts (PyPI behind a TLS-inspecting proxy).
dir=""
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx" ${dir:+"$dir"}' EXIT
mkdir -p "$ctx/local-ca"
cp /usr/local/share/ca-certificates/*.crt "$ctx/local-ca/" 2>/dev/null || true

if ! have "$base"; then
  command -v debootstrap >/dev/null 2>&1 || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  }
  dir="$(mktemp -d)"
  say "debootstrap bookworm from $mirror (about a minute)"
  start=$(date +%s)
  debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || {
    tail -n 20 "$dir.log" >&2
    exit 1
  }
  rm -f "$dir.log"
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
  tar -C "$dir" -c . | docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' - "$base" >/dev/null
  say "$base imported in $(( $(date +%s) - start )) s"
fi

build() {  # name, Dockerfile text
  say "building $1 from Debian packages"
  local out
  printf '%s\n' "$2" >"$ctx/Dockerfile"
  if ! out="$(docker build -q -t "$1" --label org.toolq.standin=true "$ctx" 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
}

for image in "${need[@]}"; do
  case "$image" in
    "$TOOLQ_PYTHON_IMAGE")
      # python:3.11-slim's shape: python and pip on PATH, pip usable (no PEP 668 marker), C.UTF-8.
      build "$image" "FROM $base
COPY local-ca/ /usr/local/share/ca-certificates/
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates \\
 && rm -rf /var/lib/apt/lists/* /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && ln -s /usr/bin/python3 /usr/local/bin/python && ln -s /usr/bin/pip3 /usr/local/bin/pip
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
CMD [\"python3\"]"
      ;;
    "$TOOLQ_REDIS_IMAGE")
      # The official image turns protected mode off (it listens on the container's network);
      # Debian's redis-server keeps it on without a config file, so the entrypoint says it.
      build "$image" "FROM $base
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \\
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data
RUN printf '%s\n' '#!/bin/sh' \\
  'if [ \"\$1\" = redis-server ]; then shift; c=; case \"\$1\" in *.conf) c=\"\$1\"; shift;; esac' \\
  '  set -- redis-server \${c:+\"\$c\"} --protected-mode no \"\$@\"; fi' \\
  'exec \"\$@\"' > /usr/local/bin/docker-entrypoint.sh && chmod +x /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
EXPOSE 6379
ENTRYPOINT [\"docker-entrypoint.sh\"]
CMD [\"redis-server\"]"
      ;;
  esac
done
docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^($TOOLQ_PYTHON_IMAGE|$TOOLQ_REDIS_IMAGE) " \
  | sed 's/^/docker-standins: /'

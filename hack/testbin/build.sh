#!/usr/bin/env bash
# Builds the real control-plane binaries the test harness (internal/testenv)
# runs: etcd, kube-apiserver, kube-controller-manager and kubectl, from the
# pinned tools modules in hack/testbin/{etcd,kube}.
#
# Usage: hack/testbin/build.sh [OUT_DIR] [kube|etcd ...]
#   OUT_DIR defaults to ./bin (relative to the repo root).
#   With no component names both kube and etcd are built.
#
# A component is rebuilt only when it is stale: a stamp file in OUT_DIR
# records a hash of the tools module's go.mod/go.sum and the Go version used.
# Binaries without a stamp (built by hand) are accepted if every one of them
# is newer than the module's go.mod and go.sum. Binaries are built into a
# temporary directory and renamed into place, and a lock serialises
# concurrent callers, so calling this repeatedly (or in parallel) is safe.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"

OUT="${1:-${ROOT}/bin}"
shift || true
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"

components=("$@")
if [[ ${#components[@]} -eq 0 ]]; then
  components=(kube etcd)
fi

export GOWORK=off

TMPDIRS=()
cleanup() { local d; for d in "${TMPDIRS[@]}"; do rm -rf "${d}"; done; }
trap cleanup EXIT

log() { echo "testbin: $*" >&2; }

# Serialise concurrent invocations on the same OUT dir.
if command -v flock >/dev/null 2>&1; then
  exec 9>"${OUT}/.testbin.lock"
  flock 9
fi

GOVERSION="$(go env GOVERSION)"

stamp_value() { # <module dir>
  cat "$1/go.mod" "$1/go.sum" | { sha256sum 2>/dev/null || shasum -a 256; } | cut -d' ' -f1 | tr -d '\n'
  echo " ${GOVERSION}"
}

# up_to_date <module dir> <stamp file> <binaries...>
up_to_date() {
  local mod="$1" stamp="$2"
  shift 2
  local b
  for b in "$@"; do
    [[ -x "${OUT}/${b}" ]] || return 1
  done
  if [[ -f "${stamp}" ]]; then
    [[ "$(cat "${stamp}")" == "$(stamp_value "${mod}")" ]]
    return
  fi
  # No stamp: accept binaries that are newer than go.mod and go.sum.
  for b in "$@"; do
    [[ "${OUT}/${b}" -nt "${mod}/go.mod" && "${OUT}/${b}" -nt "${mod}/go.sum" ]] || return 1
  done
  stamp_value "${mod}" >"${stamp}"
}

# install_from <tmp dir> <binaries...>: atomically move built binaries into OUT.
install_from() {
  local tmp="$1" b
  shift
  for b in "$@"; do
    mv -f "${tmp}/${b}" "${OUT}/${b}"
  done
}

build_kube() {
  local mod="${HERE}/kube" stamp="${OUT}/.stamp-kube"
  local bins=(kube-apiserver kube-controller-manager kubectl)
  if up_to_date "${mod}" "${stamp}" "${bins[@]}"; then
    log "kube binaries are up to date in ${OUT}"
    return
  fi
  local version
  version="$(cd "${mod}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  local major minor rest
  major="${version#v}"; major="${major%%.*}"
  rest="${version#v*.}"; minor="${rest%%.*}"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -w -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
  log "building kube-apiserver, kube-controller-manager, kubectl ${version} into ${OUT} (this takes a while)"
  local tmp
  tmp="$(mktemp -d "${OUT}/.build-kube.XXXXXX")"
  TMPDIRS+=("${tmp}")
  (cd "${mod}" && go build -ldflags "${ldflags}" -o "${tmp}/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl)
  install_from "${tmp}" "${bins[@]}"
  stamp_value "${mod}" >"${stamp}"
}

build_etcd() {
  local mod="${HERE}/etcd" stamp="${OUT}/.stamp-etcd"
  if up_to_date "${mod}" "${stamp}" etcd; then
    log "etcd is up to date in ${OUT}"
    return
  fi
  local version
  version="$(cd "${mod}" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
  log "building etcd ${version} into ${OUT}"
  local tmp
  tmp="$(mktemp -d "${OUT}/.build-etcd.XXXXXX")"
  TMPDIRS+=("${tmp}")
  (cd "${mod}" && go build -ldflags "-s -w" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3)
  install_from "${tmp}" etcd
  stamp_value "${mod}" >"${stamp}"
}

for c in "${components[@]}"; do
  case "${c}" in
    kube) build_kube ;;
    etcd) build_etcd ;;
    *) echo "testbin: unknown component ${c} (want kube or etcd)" >&2; exit 2 ;;
  esac
done

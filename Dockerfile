# syntax=docker/dockerfile:1
#
# kausality-proxy image: a static, non-root, distroless image holding the
# single binary.
#
#   docker build -t kausality-proxy:dev .        (or: make docker-build)
#
# The go build line below must stay the same as `make build` (CGO_ENABLED=0,
# -trimpath, -ldflags '-s -w'): internal/deploytest parses it from this file,
# builds the binary with exactly these flags and checks that it is static.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# The official image keeps the module cache under /go; put it where the
# cache mount is.
ENV GOMODCACHE=/root/go/pkg/mod \
    GOCACHE=/root/.cache/go-build \
    GOFLAGS=-mod=readonly \
    CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/kausality-proxy ./cmd/kausality-proxy

# distroless/static: no shell, no package manager, no libc; CA certificates,
# /etc/passwd and tzdata only. The nonroot tag runs as 65532:65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kausality-proxy /kausality-proxy
USER 65532:65532
EXPOSE 8443 9090
ENTRYPOINT ["/kausality-proxy"]

# syntax=docker/dockerfile:1
#
# sturnus as one static binary in an empty image.
#
#   docker build -t sturnus .                                  # linux/amd64: x86_64-unknown-linux-musl
#   docker buildx build --platform linux/arm64 -t sturnus .    # linux/arm64: aarch64-unknown-linux-musl
#
# The build stage runs on the build machine's own platform and makes the binary with the
# Makefile's recipe for the image's platform, the same commands as outside Docker:
#   amd64: `make static`        (musl-gcc; on an amd64 build machine)
#   arm64: `make static-arm64`  (cross-built with cargo-zigbuild, zig as C compiler and linker;
#                                on an amd64 or arm64 build machine, so nothing is emulated)
#
# Run:
#   docker run --rm -p 4000:4000 -v "$PWD/config.toml:/config.toml:ro" -e OPENAI_API_KEY \
#     sturnus --listen 0.0.0.0:4000 --allow-anonymous
# (inside a container the proxy must listen on all interfaces for -p to reach it: --listen or
# STURNUS_LISTEN override the config's `listen`, and sturnus warns when it finds itself in a
# container bound to loopback. Off loopback sturnus refuses to start without [auth] client keys
# unless --allow-anonymous (STURNUS_ALLOW_ANONYMOUS=true) says that whoever reaches the port may
# use it, and so spend the provider keys: keep such a port behind your own network controls, or
# configure [auth] and drop the flag. As a Kubernetes sidecar keep it on 127.0.0.1, see
# examples/kubernetes/).
#
# What the image relies on, proven by tests/integration/static_binary.rs on every CI run: the
# binary needs no libc, no /etc, no CA files (public roots are compiled in; SSL_CERT_FILE adds a
# private CA) and no environment variables beyond those its config references.

FROM --platform=$BUILDPLATFORM rust:1-bookworm AS build
ARG TARGETARCH
ARG BUILDARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake musl-tools python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN case "${TARGETARCH:-amd64}/${BUILDARCH:-amd64}" in \
      amd64/amd64) make static && target=x86_64-unknown-linux-musl ;; \
      arm64/*) make static-arm64 && target=aarch64-unknown-linux-musl ;; \
      *) echo "unsupported: TARGETARCH=${TARGETARCH} on BUILDARCH=${BUILDARCH}" >&2; exit 1 ;; \
    esac \
 && cp "target/${target}/release/sturnus" /sturnus

FROM scratch
COPY --from=build /sturnus /usr/local/bin/sturnus
# Any non-root uid works; the image has no /etc/passwd, so it is numeric (65532 = "nonroot").
USER 65532:65532
EXPOSE 4000
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s \
  CMD ["/usr/local/bin/sturnus", "healthcheck", "--url", "http://127.0.0.1:4000/health"]
ENTRYPOINT ["/usr/local/bin/sturnus", "--config", "/config.toml"]

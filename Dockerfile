# syntax=docker/dockerfile:1
#
# sturnus as one static binary in an empty image.
#
#   docker build -t sturnus .                                  # linux/amd64: x86_64-unknown-linux-musl
#   docker buildx build --platform linux/arm64 -t sturnus .    # linux/arm64: aarch64-unknown-linux-musl
#
# The build stage runs on the target platform (natively or emulated by buildx) and links a
# static-pie musl binary for it. To build the aarch64 binary without Docker on an arm64 host:
#   rustup target add aarch64-unknown-linux-musl && apt-get install musl-tools cmake
#   cargo build --release --target aarch64-unknown-linux-musl
#
# Run:  docker run --rm -p 4000:4000 -v "$PWD/config.toml:/config.toml:ro" -e OPENAI_API_KEY sturnus
# (inside a container the config's `listen` must be "0.0.0.0:4000" for -p to reach it; as a
# Kubernetes sidecar keep it on 127.0.0.1, see examples/kubernetes/).
#
# What the image relies on, proven by tests/integration/static_binary.rs on every CI run: the
# binary needs no libc, no /etc, no CA files (public roots are compiled in; SSL_CERT_FILE adds a
# private CA) and no environment variables beyond those its config references.

FROM rust:1-bookworm AS build
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools cmake \
 && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH=${TARGETARCH}" >&2; exit 1 ;; \
    esac > /rust-target \
 && rustup target add "$(cat /rust-target)"
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target "$(cat /rust-target)" \
 && cp "target/$(cat /rust-target)/release/sturnus" /sturnus

FROM scratch
COPY --from=build /sturnus /usr/local/bin/sturnus
# Any non-root uid works; the image has no /etc/passwd, so it is numeric (65532 = "nonroot").
USER 65532:65532
EXPOSE 4000
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s \
  CMD ["/usr/local/bin/sturnus", "healthcheck", "--url", "http://127.0.0.1:4000/health"]
ENTRYPOINT ["/usr/local/bin/sturnus", "--config", "/config.toml"]

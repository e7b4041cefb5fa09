# The two commands of the README, `make demo` and `make test`, and the builds for every platform
# sturnus ships on. Each target installs what it needs (scripts/bootstrap.sh).
export PATH := $(HOME)/.local/bin:$(HOME)/.cargo/bin:$(PATH)

# The test suite is built for this target, so the binary under test is the static one the
# Dockerfile ships (one build serves both).
MUSL_TARGET := x86_64-unknown-linux-musl
# The arm64 image's binary, cross-built with zig as C compiler and linker (cargo-zigbuild).
ARM64_TARGET := aarch64-unknown-linux-musl
MACOS_TARGETS := x86_64-apple-darwin aarch64-apple-darwin
# jemalloc is built for 64 KiB pages on aarch64, so one binary runs on kernels with 4, 16 and
# 64 KiB pages (a cross build cannot ask the machine it runs on).
ARM64_ENV := JEMALLOC_SYS_WITH_LG_PAGE=16
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

.PHONY: demo test lint build static static-arm64 smoke-arm64 check-macos bootstrap

bootstrap:
	@scripts/bootstrap.sh

## Run the built-in demo: fake providers, the real proxy, live routing tables (~20 s).
demo: bootstrap
	cargo run --quiet -- demo

## Lint and run the whole test suite against the static musl binary.
test: bootstrap lint
	cargo test --target $(MUSL_TARGET) --all-targets

lint: bootstrap
	cargo fmt --check
	cargo clippy --target $(MUSL_TARGET) --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --target $(MUSL_TARGET)

build: bootstrap
	cargo build --release

## The static x86_64 binary (the amd64 image's): target/x86_64-unknown-linux-musl/release/sturnus,
## the proxy alone (no `tooling`: no demo, no simulator).
static:
	@scripts/bootstrap.sh static
	cargo build --release --locked --no-default-features --target $(MUSL_TARGET)

## The static aarch64 binary (the arm64 image's): target/aarch64-unknown-linux-musl/release/sturnus
static-arm64:
	@scripts/bootstrap.sh arm64
	$(ARM64_ENV) cargo zigbuild --release --locked --no-default-features --target $(ARM64_TARGET)

## Run that binary in an arm64 Linux guest (qemu-system-aarch64) with an empty environment:
## /health, a chat, a stream, against a fake provider on this machine.
smoke-arm64: static-arm64
	@ARM64_VM_DIR=$(TARGET_DIR)/arm64-vm scripts/bootstrap.sh static arm64-vm
	STURNUS_ARM64_BIN=$(TARGET_DIR)/$(ARM64_TARGET)/release/sturnus ARM64_VM_DIR=$(TARGET_DIR)/arm64-vm \
	  cargo test --target $(MUSL_TARGET) --test integration -- --ignored arm64::

## Compile sturnus (library, binary, tests) for macOS on Intel and Apple silicon.
check-macos:
	@scripts/bootstrap.sh macos
	cargo-zigbuild check --locked --all-targets $(addprefix --target ,$(MACOS_TARGETS))

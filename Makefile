# The two commands of the README: `make demo` and `make test`. Both bring what they need.
export PATH := $(HOME)/.local/bin:$(HOME)/.cargo/bin:$(PATH)

# The test suite is built for this target, so the binary under test is the static one the
# Dockerfile ships (one build serves both).
MUSL_TARGET := x86_64-unknown-linux-musl

.PHONY: demo test lint build static bootstrap

bootstrap:
	@scripts/bootstrap.sh

## Run the built-in demo: simulated providers, the real proxy, live routing tables (~20 s).
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

## The static binary (what the Dockerfile builds): target/x86_64-unknown-linux-musl/release/sturnus
static: bootstrap
	cargo build --release --target $(MUSL_TARGET)

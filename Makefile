# The two commands of the README: `make demo` and `make test`. Both bring what they need.
export PATH := $(HOME)/.local/bin:$(HOME)/.cargo/bin:$(PATH)

.PHONY: demo test lint build bootstrap

bootstrap:
	@scripts/bootstrap.sh

## Run the built-in demo: simulated providers, the real proxy, live routing tables (~20 s).
demo: bootstrap
	cargo run --quiet -- demo

## Lint and run the whole test suite.
test: bootstrap lint
	cargo test --all-targets

lint: bootstrap
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

build: bootstrap
	cargo build --release

# arca: `make run` starts the single binary on embedded defaults; `make test` installs what the
# tests need and runs them all.
CARGO ?= cargo

.PHONY: run build test deps fmt lint bench

build:
	$(CARGO) build --workspace --bins

run:
	$(CARGO) build --release --bin arca
	./target/release/arca server

test: build
	$(CARGO) test --workspace

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

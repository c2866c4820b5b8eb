# One command per artefact; everything lands in dist/.
VERSION := $(shell python3 -c "import re;print(re.search(r'^version = \"(.+)\"', open('pyproject.toml').read(), re.M).group(1))")
PYTHON ?= .venv/bin/python

.PHONY: binary deb clean

binary: dist/lavinmq

dist/lavinmq: $(shell git ls-files lavinmq packaging) setup.py pyproject.toml
	./dev setup
	$(PYTHON) -m pip install -q "pyinstaller>=6,<7"
	cd packaging && ../$(PYTHON) -m PyInstaller --clean --noconfirm --log-level WARN \
	    --distpath ../dist --workpath ../build/pyinstaller lavinmq.spec
	ln -sf lavinmq dist/lavinmqctl
	ln -sf lavinmq dist/lavinmqperf
	dist/lavinmq --version

deb: dist/lavinmq
	dpkg-buildpackage -b -us -uc --no-sign
	mv ../lavinmq_$(VERSION)_*.deb dist/
	rm -f ../lavinmq_$(VERSION)_*.buildinfo ../lavinmq_$(VERSION)_*.changes
	lintian --suppress-tags-from-file /dev/null dist/lavinmq_$(VERSION)_*.deb || true

clean:
	rm -rf dist build/pyinstaller debian/lavinmq debian/.debhelper debian/files debian/*.substvars debian/*.debhelper.log

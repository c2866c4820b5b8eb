"""ForgetFS needs root, /dev/fuse and libfuse3 (Debian's fuse3, which .ci/run
installs). Without them these tests skip, except under CI, where a missing
piece fails them instead of passing unnoticed."""
import os

import pytest

from tests.powerloss.mount import ForgetMount, loop_unavailable_reason, unavailable_reason


def require_fuse(loop=False):
    """loop: also loop devices and e2fsprogs (mount.Ext4OnForget)."""
    reason = loop_unavailable_reason() if loop else unavailable_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"ForgetFS cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture
def forget_mount(tmp_path):
    require_fuse()
    mount = ForgetMount(tmp_path / "backing", tmp_path / "mnt", log_path=str(tmp_path / "forgetfs.log"))
    mount.start()
    yield mount
    mount.stop()

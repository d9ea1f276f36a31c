"""The README's demo: a private containerd 1.7 with NRI, nri-pinner on its embedded default config,
a Guaranteed and a Burstable pod through CRI; prints `nri-pinner status` and each container's
Cpus_allowed_list, then removes only what it started. Run with `./scripts/demo`."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from .conftest import e2e_base_dir
from .cri_stubs import ensure_cri_stubs
from .harness import PrivateContainerd, claim_workdir
from .pinner import Pinner, start_pinner


def main() -> int:
    ensure_cri_stubs()
    workdir, lock = claim_workdir(e2e_base_dir() / "demo")
    runtime = PrivateContainerd("1.7", workdir)
    pinner: Pinner | None = None
    try:
        runtime.start()
        print(f"== containerd {runtime.version} with NRI on {runtime.nri_socket}")
        state = Path(tempfile.mkdtemp(prefix="pinner-demo-", dir="/tmp"))
        # the embedded defaults (`nri-pinner config --defaults`), with only this containerd's paths changed
        pinner = start_pinner(runtime, state, test_settings=False)
        print("== nri-pinner on the embedded defaults; changed keys:")
        print("   " + pinner.config_path.read_text().strip().replace("\n", "\n   "))
        guaranteed = runtime.run_pod("guaranteed", 1000, 1000, name="demo-guaranteed")
        burstable = runtime.run_pod("burstable", 250, 500, name="demo-burstable")
        print("== nri-pinner status")
        print(pinner.status(as_json=False))
        ok = True
        for pod in (guaranteed, burstable):
            for name, cid in pod.containers.items():
                allowed = runtime.cpus_allowed_list(cid)
                print(f"== {pod.name}/{name}: Cpus_allowed_list: {allowed}")
        g_cpus = runtime.cpus_allowed_list(guaranteed.container_ids[0])
        b_cpus = runtime.cpus_allowed_list(burstable.container_ids[0])
        exclusive = pinner.assignment(guaranteed.container_ids[0])
        if not exclusive["exclusive"] or g_cpus != exclusive["cpus"] or g_cpus in b_cpus.split(","):
            print(f"FAIL: the Guaranteed container is not alone on an exclusive CPU ({g_cpus}; burstable {b_cpus})")
            ok = False
        else:
            print(f"OK: the Guaranteed container runs alone on exclusive CPU {g_cpus}; the Burstable one on {b_cpus}")
        runtime.remove_pod(guaranteed)
        runtime.remove_pod(burstable)
        return 0 if ok else 1
    finally:
        if pinner is not None:
            pinner.stop()
        runtime.stop()
        lock.close()


if __name__ == "__main__":
    sys.exit(main())

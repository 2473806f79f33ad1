"""The lab harness's reading of ansible and molecule output: no lab needed, so these run
in every test run. A failed scenario's message must show the failed task, not only the
destroy step that ran after it (the output's tail)."""

from conftest import failed_tasks

MOLECULE_OUTPUT = """\
INFO     [tenant_guest > converge] Executing

PLAY [Install the tenant's inference stack (guest role)] ***********************

TASK [gpuhost.kvm.guest : Load the image archive] ******************************
fatal: [tenant-lab]: FAILED! => {"changed": true, "cmd": ["docker", "load"], "rc": 1}
  stderr: no space left on device

PLAY RECAP *********************************************************************
tenant-lab                 : ok=30   changed=5    unreachable=0    failed=1

INFO     [tenant_guest > destroy] Executing

TASK [Forget the instance config] **********************************************
skipping: [localhost]
"""


def test_failed_tasks_names_the_step_and_the_task():
    report = failed_tasks(MOLECULE_OUTPUT)
    assert report.splitlines() == [
        "INFO     [tenant_guest > converge] Executing",
        "TASK [gpuhost.kvm.guest : Load the image archive]",
        'fatal: [tenant-lab]: FAILED! => {"changed": true, "cmd": ["docker", "load"], "rc": 1}',
        "  stderr: no space left on device",
    ]


def test_failed_tasks_keeps_every_failure_and_says_when_there_is_none():
    output = MOLECULE_OUTPUT.replace("skipping: [localhost]", "failed: [localhost] (item=x) => {}")
    report = failed_tasks(output)
    assert report.count("\n---\n") == 1
    assert report.endswith("TASK [Forget the instance config]\nfailed: [localhost] (item=x) => {}")
    assert failed_tasks("PLAY RECAP\nlocalhost : ok=1\n") == "(no failed task in the output)"

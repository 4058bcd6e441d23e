"""A server project's own test, as it would write it (``pytest -p kvdoctor``, no subprocess of its own), runs
``consistency`` on real SGLang servers through kvdoctor's pytest plugin, and fails with the first divergence, the
component and SGLang's file:line in its message when a fault is armed inside the pressured decode.

One PD deployment of a shrunk Llama (about 2 minutes): one of CI's chosen few (``make test-server``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.server
pytest_plugins = ["pytester"]

SERVER_PROJECT_TEST = """
def test_llama_keeps_its_kv_over_pd_retraction(kvdoctor_consistency):
    report = kvdoctor_consistency(
        "llama-3.1-8b", shrink=True, topology="pd", inject="drop-kv",
        requests=16, prompt_tokens=16, max_new_tokens=48, concurrency=16, timeout=900,
    )
    assert report.passed
"""


def test_a_projects_consistency_test_fails_with_the_first_divergence(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_server_project=SERVER_PROJECT_TEST)
    result = pytester.runpytest_subprocess("-p", "kvdoctor", "-p", "no:cacheprovider", "-m", "kvdoctor_server")
    result.assert_outcomes(failed=1)
    # The assert's own line: the verdict and the first diverging request; the kvdoctor section: the whole trace.
    result.stdout.fnmatch_lines(["*where False = <kvdoctor consistency: verdict: FAILED*first: request * at token *"])
    out = result.stdout.str()
    section = out.split("- kvdoctor -", 1)[1]
    assert "first disagrees at" in section and "full_kv" in section, section[:3000]
    assert "diverges at token" in section  # each diverging request, from the report's JUnit cases

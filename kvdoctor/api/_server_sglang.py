"""SGLang's room in the API (its line of ``kvdoctor.api._servers.SERVERS``): ``inspect``'s job, the installed SGLang
as ``drift``'s other side (told the GPU it runs on), and a round trip whose every option is SGLang's."""

from __future__ import annotations

from kvdoctor.api._drift_sides import EngineSide
from kvdoctor.api._inspect_sglang import SglangInspectJob
from kvdoctor.api._roundtrip_sides import FaultChecks
from kvdoctor.api._servers import ServerApi
from kvdoctor.engines import Engine

SERVER = ServerApi(
    inspect_job=SglangInspectJob,
    drift_side=EngineSide(Engine.SGLANG, platform=True),
    roundtrip_side=FaultChecks(),  # kvdoctor's model of SGLang's pools, or the installed SGLang: both take every option
)

"""Regenerate kvdoctor/core/sglang/_generated/transformers_causal_lm.py from the transformers SGLang pins.

Usage: .venv-sglang/bin/python scripts/transformers-causal-lm.py \
           > kvdoctor/core/sglang/_generated/transformers_causal_lm.py

SGLang serves an architecture it does not register through its Transformers backend
(``TransformersForCausalLM``, appended by ``ModelRegistry._normalize_archs``), which exists for every
``model_type`` that transformers maps to a causal-LM class. This lists those model types, read from
the installed transformers' own ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (a data table; no model is
built), so kvdoctor's core can tell "SGLang serves it through transformers" from "SGLang does not know
it" without importing transformers.
"""

from __future__ import annotations

import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def main() -> None:
    print(f'"""Model types transformers {transformers.__version__} maps to a causal-LM class (data, not logic).')
    print()
    print("SGLang serves such a model through its Transformers backend when it registers no class of its own")
    print("(``srt/models/registry.py``, ``ModelRegistry._normalize_archs``): attention KV only, on the plain pools.")
    print("Regenerate with ``scripts/transformers-causal-lm.py`` when the transformers pin in constraints/sglang.txt")
    print('moves."""')
    print("\nfrom __future__ import annotations\n")
    print(f'TRANSFORMERS_VERSION = "{transformers.__version__}"')
    print("TRANSFORMERS_CAUSAL_LM_MODEL_TYPES: frozenset[str] = frozenset(\n    {")
    for name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        print(f'        "{name}",')
    print("    }\n)")


if __name__ == "__main__":
    main()

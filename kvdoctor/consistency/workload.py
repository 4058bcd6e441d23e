"""The workload both deployments get: seeded random token-id prompts, greedy, fixed length.

Token ids, not text: a random-weight model has no language, and ids make the prompt exact whatever
tokenizer the server loads. Ids below ``FIRST_ID`` are left out (the offline tokenizer's special
tokens: pad, bos, eos, unk), so no prompt contains an end-of-sequence token.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from kvdoctor._exceptions import InputError
from kvdoctor.core.declared import option

FIRST_ID = 4
SEED_MAX = 2**63 - 1  # torch.manual_seed takes up to 2**64 - 1 (then "Overflow when unpacking long long"); int64 is
# what every reader of the JSON can hold


@dataclass(frozen=True)
class Workload:
    requests: int = option(32, "--requests", help="Prompts (seeded random token ids).")
    prompt_tokens: int = option(32, "--prompt-tokens", help="Tokens per prompt.")
    max_new_tokens: int = option(64, "--max-new-tokens", help="Greedy tokens per request.")
    concurrency: int = option(32, "--concurrency", help="Requests in flight (the same for every run).")
    seed: int = option(0, "--seed", help="Seeds the prompts and the random checkpoint.")
    top_logprobs: int = 2  # the reference's top-2 margin at a divergence needs two

    def check(self) -> None:
        """Each count at least 1 and the seed in range: cheap arithmetic, before any prompt exists (the bounds by
        what the plan and the machine hold come after the config is read: ``kvdoctor.consistency.run.prepare``)."""
        for name, value in (
            ("--requests", self.requests),
            ("--prompt-tokens", self.prompt_tokens),
            ("--max-new-tokens", self.max_new_tokens),
            ("--concurrency", self.concurrency),
        ):
            if value < 1:
                raise InputError(f"{name} must be >= 1, got {value}")
        if not 0 <= self.seed <= SEED_MAX:
            raise InputError(
                f"--seed must be within 0..{SEED_MAX} (it seeds torch.manual_seed for the checkpoint), got {self.seed}"
            )

    @property
    def in_flight(self) -> int:
        return min(self.requests, self.concurrency)

    @property
    def per_request_tokens(self) -> int:
        return self.prompt_tokens + self.max_new_tokens

    @property
    def peak_tokens(self) -> int:
        return self.in_flight * self.per_request_tokens

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def prompts(workload: Workload, vocab_size: int) -> list[list[int]]:
    """``requests`` prompts of ``prompt_tokens`` ids each, the same for the same seed and vocabulary."""
    if vocab_size <= FIRST_ID:
        raise InputError(f"vocab_size {vocab_size} leaves no ordinary token ids (ids below {FIRST_ID} are special)")
    rng = random.Random(workload.seed)
    return [
        [rng.randrange(FIRST_ID, vocab_size) for _ in range(workload.prompt_tokens)] for _ in range(workload.requests)
    ]

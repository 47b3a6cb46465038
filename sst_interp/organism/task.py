"""The hops task: k-hop pointer chasing over variable bindings, with the number of hops known per question.

A question is a shuffled list of bindings and a query; each binding is one token (``c=b``), and so are ``?``,
the queried variable and the answer::

    c=b a=7 b=a d=5 e=d ?c           answer 7, hops 2: c -> b -> a -> 7

Why a binding is one token: the lookup a hop needs is then one attention read (the query's variable against the
bindings' left sides, the value from the same token), which a small model learns in a few hundred steps. Written
one character per token (``c=b;``) the lookup needs two composed heads (one that moves each binding's left side
onto its right side, one that matches), and 2-layer models trained here stayed at chance for 1,500 steps. The
prompt ends with the queried variable, whose column predicts the answer.

Each variable is bound exactly once, either to a digit or to another variable, so the bindings form chains that
end in a digit. The query's chain has ``hops`` bindings (``chain = [c, b, a, 7]``: ``chain[i]`` is the **hop-i
value**, ``chain[hops]`` the answer). The other bindings form distractor chains, each ending in a digit of its
own: the digits at the ends of the chains are distinct, so a model that picks a chain end at random is right with
probability ``1 / chains`` (:attr:`HopsQuestion.chance`).

Which algorithm a trained model uses is not given by the task (one hop per iteration, or pointer doubling); the
task only fixes the candidate intermediate values, which every question stores: the hop-i value and, for every
variable of the prompt, its chain.

Items are a pure function of ``(spec, split, index)``: item ``i`` of a split is drawn from its own
``random.Random``, seeded from the split's seed and ``i``, so the splits are disjoint by construction (a question
drawn by two splits is dropped from the later one; see :func:`split_items`).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

from sst_interp.kernels.errors import UsageError

VARIABLES: str = string.ascii_lowercase
DIGITS: str = string.digits
BIND, SEPARATOR, QUERY = "=", " ", "?"
SPLITS: tuple[str, ...] = ("train", "validation", "test")
# Distinct seeds per split: a split's item i never shares a generator state with another split's item i.
_SPLIT_SEEDS: dict[str, int] = {"train": 11, "validation": 23, "test": 37}


@dataclass(frozen=True)
class HopsSpec:
    """What a hops question looks like.

    Args:
        bindings: bindings per question (every question has exactly this many, so all prompts have one length).
        min_hops: fewest hops of a query chain (>= 1).
        max_hops: most hops of a query chain (<= ``bindings``).
        chains: chains per question, the query's included (each ends in its own digit; 2-10).
        variables: how many of the letters a-z the variables are drawn from (the first ``variables``).
        seed: the generator's seed; the splits derive their own from it.
    """

    bindings: int = 8
    min_hops: int = 1
    max_hops: int = 6
    chains: int = 3
    variables: int = len(VARIABLES)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.min_hops < 1:
            raise UsageError(f"min_hops is {self.min_hops}; a question needs at least 1 hop")
        if self.max_hops < self.min_hops:
            raise UsageError(f"max_hops {self.max_hops} is below min_hops {self.min_hops}; give max_hops >= min_hops")
        if not 2 <= self.chains <= len(DIGITS):
            raise UsageError(f"chains is {self.chains}; give 2-{len(DIGITS)} (each chain ends in a digit of its own)")
        if not 1 <= self.variables <= len(VARIABLES):
            raise UsageError(f"variables is {self.variables}; give 1-{len(VARIABLES)} (the letters a-z)")
        if self.bindings > self.variables:
            raise UsageError(f"bindings is {self.bindings}; at most {self.variables} variables exist (each variable "
                             "is bound once)")
        # the query chain takes max_hops bindings and every other chain at least one
        if self.max_hops + self.chains - 1 > self.bindings:
            raise UsageError(f"{self.bindings} bindings cannot hold a {self.max_hops}-hop chain and "
                             f"{self.chains - 1} distractor chain(s); give more bindings or fewer hops or chains")

    @property
    def prompt_length(self) -> int:
        """Tokens (without <bos>) of every prompt: one per binding, then ``?`` and the variable."""
        return self.bindings + 2


@dataclass(frozen=True)
class HopsQuestion:
    """One question with its ground truth.

    Args:
        prompt: the bindings and the query, e.g. ``"c=b a=7 b=a ?c"``.
        answer: the digit the query resolves to.
        hops: bindings followed from the query to the answer.
        chain: ``chain[i]`` is the hop-i value (``chain[0]`` the query, ``chain[hops]`` the answer).
        chains: chains in the prompt (chance is ``1 / chains``).
        successors: every variable's own chain, ``successors[v] = [v, next, ..., digit]`` (what a doubling
            algorithm could hold at a variable's binding).
    """

    prompt: str
    answer: str
    hops: int
    chain: tuple[str, ...]
    chains: int
    successors: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def chance(self) -> float:
        """Accuracy of a guess among the chain ends."""
        return 1.0 / self.chains

    def hop_value(self, hop: int) -> str:
        """The value after ``hop`` bindings (``0 <= hop <= hops``)."""
        if not 0 <= hop <= self.hops:
            raise UsageError(f"hop {hop} is outside 0..{self.hops} for this {self.hops}-hop question")
        return self.chain[hop]


def _chain_lengths(rng: random.Random, spec: HopsSpec, hops: int) -> list[int]:
    """Bindings per chain: the query's ``hops`` first, then ``chains - 1`` distractor lengths summing to the rest."""
    rest, others = spec.bindings - hops, spec.chains - 1
    # a random composition of `rest` into `others` positive parts
    cuts = sorted(rng.sample(range(1, rest), others - 1)) if others > 1 else []
    bounds = [0, *cuts, rest]
    return [hops] + [bounds[i + 1] - bounds[i] for i in range(others)]


def make_question(spec: HopsSpec, rng: random.Random, hops: int) -> HopsQuestion:
    """Draw one ``hops``-hop question from ``rng``."""
    if not spec.min_hops <= hops <= spec.max_hops:
        raise UsageError(f"hops {hops} is outside the spec's {spec.min_hops}..{spec.max_hops}")
    names = rng.sample(VARIABLES[:spec.variables], spec.bindings)
    ends = rng.sample(DIGITS, spec.chains)
    bindings: list[tuple[str, str]] = []
    successors: dict[str, tuple[str, ...]] = {}
    query_chain: tuple[str, ...] = ()
    start = 0
    for index, length in enumerate(_chain_lengths(rng, spec, hops)):
        chain = (*names[start:start + length], ends[index])
        start += length
        bindings.extend((chain[j], chain[j + 1]) for j in range(length))
        for j in range(length):
            successors[chain[j]] = chain[j:]
        if index == 0:
            query_chain = chain
    rng.shuffle(bindings)
    body = SEPARATOR.join(f"{left}{BIND}{right}" for left, right in bindings)
    prompt = f"{body}{SEPARATOR}{QUERY}{query_chain[0]}"
    return HopsQuestion(prompt=prompt, answer=query_chain[-1], hops=hops, chain=query_chain, chains=spec.chains,
                        successors=successors)


def item(spec: HopsSpec, split: str, index: int) -> HopsQuestion:
    """Item ``index`` of ``split``: its hop count cycles through ``min_hops..max_hops`` (balanced per split)."""
    if split not in _SPLIT_SEEDS:
        raise UsageError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    span = spec.max_hops - spec.min_hops + 1
    rng = random.Random((spec.seed * 1_000_003 + _SPLIT_SEEDS[split]) * 1_000_033 + index)
    return make_question(spec, rng, spec.min_hops + index % span)


def training_item(spec: HopsSpec, index: int, ceiling: int) -> HopsQuestion:
    """Training question ``index`` under a curriculum: its hop count cycles through ``min_hops..ceiling``.

    Drawn like :func:`item`'s ``train`` split (same seeds), so with ``ceiling = max_hops`` it is ``item(spec,
    "train", index)``.
    """
    if not spec.min_hops <= ceiling <= spec.max_hops:
        raise UsageError(f"curriculum ceiling {ceiling} is outside {spec.min_hops}..{spec.max_hops}")
    rng = random.Random((spec.seed * 1_000_003 + _SPLIT_SEEDS["train"]) * 1_000_033 + index)
    return make_question(spec, rng, spec.min_hops + index % (ceiling - spec.min_hops + 1))


def follow_up_queries(question: HopsQuestion, rng: random.Random, count: int, ceiling: int) -> list[str]:
    """``count`` variables of ``question``'s prompt, drawn with replacement among those within ``ceiling`` hops of
    their digit (every chain's last variable is 1 hop away, so there always are some)."""
    near = sorted(v for v, chain in question.successors.items() if len(chain) - 1 <= ceiling)
    return [rng.choice(near) for _ in range(count)]


def split_items(spec: HopsSpec, split: str, n: int, exclude: frozenset[str] = frozenset()) -> list[HopsQuestion]:
    """The first ``n`` questions of ``split`` whose prompts are not in ``exclude`` (nor repeated).

    Raises UsageError when the spec cannot produce ``n`` distinct questions (too few variables, hops or chains
    for the size asked), after trying ``4 n + 100`` draws.
    """
    if n < 0:
        raise UsageError(f"a split of {n} questions; give n >= 0")
    out: list[HopsQuestion] = []
    seen = set(exclude)
    budget = 4 * n + 100
    index = 0
    while len(out) < n and index < budget:
        question = item(spec, split, index)
        index += 1
        if question.prompt not in seen:
            seen.add(question.prompt)
            out.append(question)
    if len(out) < n:
        raise UsageError(f"the spec yields only {len(out)} distinct {split} questions in {budget} draws, "
                         f"{n} asked; ask for fewer or give more bindings")
    return out


def binding_tokens() -> list[str]:
    """Every binding a prompt can hold, ``a=a`` .. ``z=9`` (a variable bound to a variable or a digit)."""
    return [f"{left}{BIND}{right}" for left in VARIABLES for right in (*VARIABLES, *DIGITS)]


def vocabulary() -> list[str]:
    """Every token a hops prompt or answer uses, in a fixed order: the variables, the digits, ``?``, the bindings."""
    return [*VARIABLES, *DIGITS, QUERY, *binding_tokens()]

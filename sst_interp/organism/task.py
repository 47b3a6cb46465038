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

**Counted hops** (``HopsSpec(counted=True)``) state the hop count in the query, ``?3c`` ("follow 3 hops from c"),
and the query's chain may run up to ``beyond`` bindings past it, so the hop-k value is usually a variable::

    c=b a=e b=a d=5 e=d f=9 ?3c      answer e, hops 3: c -> b -> a -> e (-> d -> 5)

A model that keeps following the chain after hop k answers a later hop's value; every question stores its whole
chain, so which value an overshoot by one or two hops would give is known (:meth:`HopsQuestion.overshoot`).

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
        counted: counted hops: the query states its hop count (``?3c``) and its chain may run past it.
        beyond: counted hops only: the most bindings the query's chain runs past the counted hop (each question
            draws 0..beyond uniformly; 0 means the chain ends at the answer, a digit).
    """

    bindings: int = 8
    min_hops: int = 1
    max_hops: int = 6
    chains: int = 3
    variables: int = len(VARIABLES)
    seed: int = 0
    counted: bool = False
    beyond: int = 0

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
        if self.beyond < 0 or (self.beyond and not self.counted):
            raise UsageError(f"beyond is {self.beyond}; give 0, or counted=true with beyond >= 0 (the bindings a "
                             "counted query's chain may run past its count)")
        if self.counted and self.max_hops > len(DIGITS) - 1:
            raise UsageError(f"max_hops is {self.max_hops}; a counted query states its count in one digit (1-9)")
        # the query chain takes max_hops (+ beyond) bindings and every other chain at least one
        if self.max_hops + self.beyond + self.chains - 1 > self.bindings:
            longest = f"{self.max_hops}-hop chain" + (f" running {self.beyond} past its count" if self.beyond else "")
            raise UsageError(f"{self.bindings} bindings cannot hold a {longest} and "
                             f"{self.chains - 1} distractor chain(s); give more bindings or fewer hops or chains")

    @property
    def query_length(self) -> int:
        """Tokens of the query: ``?`` and the variable, with the count between them when counted (``?3c``)."""
        return 3 if self.counted else 2

    @property
    def prompt_length(self) -> int:
        """Tokens (without <bos>) of every prompt: one per binding, then the query."""
        return self.bindings + self.query_length

    def depth_of(self, hops: int) -> int:
        """The sufficient depth of an ``hops``-hop question: ``ceil(hops / 2)`` H-cycles (one cycle's two blocks
        follow up to two bindings), the depth a counted organism is trained at and never deeper."""
        return (hops + 1) // 2

    @property
    def max_sufficient_depth(self) -> int:
        """The sufficient depth of the longest questions."""
        return self.depth_of(self.max_hops)


@dataclass(frozen=True)
class HopsQuestion:
    """One question with its ground truth.

    Args:
        prompt: the bindings and the query, e.g. ``"c=b a=7 b=a ?c"`` (counted: ``"... ?2c"``).
        answer: the value the query resolves to (a digit; counted hops: a digit or a variable).
        hops: bindings followed from the query to the answer.
        chain: ``chain[i]`` is the hop-i value (``chain[0]`` the query, ``chain[hops]`` the answer); a counted
            question's chain runs on to its digit, past ``hops`` when the chain is longer.
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
        """The value after ``hop`` bindings (``0 <= hop < len(chain)``: up to ``hops``, or on to the chain's digit for
        a counted question)."""
        if not 0 <= hop < len(self.chain):
            raise UsageError(f"hop {hop} is outside 0..{len(self.chain) - 1} for this question's chain")
        return self.chain[hop]

    @property
    def beyond(self) -> int:
        """Bindings the query's chain runs past the answer (0: the answer is the chain's digit)."""
        return len(self.chain) - 1 - self.hops

    def overshoot(self, extra: int) -> str:
        """The value ``extra`` hops past the answer, stopping at the chain's digit (a digit binds nothing): what a
        model that follows ``extra`` more bindings answers."""
        return self.chain[min(self.hops + extra, len(self.chain) - 1)]


def _chain_lengths(rng: random.Random, spec: HopsSpec, length: int) -> list[int]:
    """Bindings per chain: the query's ``length`` first, then ``chains - 1`` distractor lengths summing to the
    rest."""
    rest, others = spec.bindings - length, spec.chains - 1
    # a random composition of `rest` into `others` positive parts
    cuts = sorted(rng.sample(range(1, rest), others - 1)) if others > 1 else []
    bounds = [0, *cuts, rest]
    return [length] + [bounds[i + 1] - bounds[i] for i in range(others)]


def make_question(spec: HopsSpec, rng: random.Random, hops: int) -> HopsQuestion:
    """Draw one ``hops``-hop question from ``rng``."""
    if not spec.min_hops <= hops <= spec.max_hops:
        raise UsageError(f"hops {hops} is outside the spec's {spec.min_hops}..{spec.max_hops}")
    names = rng.sample(VARIABLES[:spec.variables], spec.bindings)
    ends = rng.sample(DIGITS, spec.chains)
    # a plain spec draws nothing more here, so its questions are the ones drawn before counted hops existed
    length = hops + (rng.randint(0, spec.beyond) if spec.counted else 0)
    bindings: list[tuple[str, str]] = []
    successors: dict[str, tuple[str, ...]] = {}
    query_chain: tuple[str, ...] = ()
    start = 0
    for index, size in enumerate(_chain_lengths(rng, spec, length)):
        chain = (*names[start:start + size], ends[index])
        start += size
        bindings.extend((chain[j], chain[j + 1]) for j in range(size))
        for j in range(size):
            successors[chain[j]] = chain[j:]
        if index == 0:
            query_chain = chain
    rng.shuffle(bindings)
    body = SEPARATOR.join(f"{left}{BIND}{right}" for left, right in bindings)
    prompt = f"{body}{SEPARATOR}{query_text(query_chain[0], hops if spec.counted else None)}"
    return HopsQuestion(prompt=prompt, answer=query_chain[hops], hops=hops, chain=query_chain, chains=spec.chains,
                        successors=successors)


def as_flag(value: object, name: str = "counted") -> bool:
    """A yes/no option given as a bool, 0/1 or its text (``--source-option counted=true``); other values are a
    UsageError."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise UsageError(f"{name}={value!r}: give true or false")


def query_text(variable: str, count: int | None = None) -> str:
    """A query: ``?c``, or with a hop count ``?3c`` (counted hops)."""
    return f"{QUERY}{'' if count is None else count}{variable}"


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


def hops_at_depth(spec: HopsSpec, depth: int, ceiling: int) -> list[int]:
    """The hop counts of ``min_hops..ceiling`` whose sufficient depth is ``depth`` (a counted organism's batch at
    that depth asks only these)."""
    return [h for h in range(spec.min_hops, ceiling + 1) if spec.depth_of(h) == depth]


def counted_training_item(spec: HopsSpec, index: int, depth: int, ceiling: int) -> HopsQuestion:
    """Training question ``index`` of a counted organism's batch at ``depth``: its hop count cycles through
    :func:`hops_at_depth` (drawn from the ``train`` split's seeds, as :func:`training_item`)."""
    choices = hops_at_depth(spec, depth, ceiling)
    if not spec.counted or not choices:
        raise UsageError(f"no counted hop count of {spec.min_hops}..{ceiling} has sufficient depth {depth}")
    rng = random.Random((spec.seed * 1_000_003 + _SPLIT_SEEDS["train"]) * 1_000_033 + index)
    return make_question(spec, rng, choices[index % len(choices)])


def counted_follow_ups(question: HopsQuestion, rng: random.Random, count: int,
                       hops: list[int]) -> list[tuple[str, int]]:
    """``count`` counted queries ``(variable, k)`` over ``question``'s bindings, drawn with replacement among the
    pairs whose variable's chain holds ``k`` bindings, ``k`` one of ``hops`` (the question's own query is always
    one, so there are some)."""
    pairs = sorted((v, k) for v, chain in question.successors.items() for k in hops if len(chain) - 1 >= k)
    return [rng.choice(pairs) for _ in range(count)]


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

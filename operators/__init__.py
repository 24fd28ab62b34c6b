"""operators: derive child kernels from parents.

Public names:
    Operator, Context, Proposal -- the interface (``operators.base``)
    TunableConstantMutation     -- offline mutation of block sizes, warps, stages
    LLMMutation, LLMClient      -- LLM rewrite through litellm (imported lazily)

Operators are plain picklable classes; they see parents as ``evo.program.Program``
values and never touch the archive, the evaluator or Ray.
"""
from operators.base import Context, Operator, Proposal
from operators.constants import TunableConstantMutation
from operators.llm import LLMMutation
from operators.llm_client import LLMClient

__all__ = ["Context", "LLMClient", "LLMMutation", "Operator", "Proposal", "TunableConstantMutation"]

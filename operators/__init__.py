"""operators: derive child kernels from parents.

Public names:
    Operator, Context, Proposal -- the interface (``operators.base``)
    TunableConstantMutation     -- offline mutation of block sizes, warps, stages
    ParameterCrossover          -- offline crossover of tunable constants between elites
    LLMMutation, LLMDiff        -- LLM full rewrite, LLM SEARCH/REPLACE edits
    LLMCrossover, LLMRepair     -- LLM crossover of two parents, LLM repair of a failed child
    LLMSeed                     -- a task's first kernels, written by the LLM from the reference
    LLMClient, Reply            -- the async LLM client (litellm or plain HTTP: operators.llm_transport)
    LLMSteering, LLMBudget, ModelEnsemble -- budgets and the model bandit the run loop keeps

Operators are plain picklable classes; they see parents as ``evo.core.program.Program``
values and never touch the archive, the evaluator or Ray.
"""
from operators.base import Context, Operator, Proposal
from operators.constants import TunableConstantMutation
from operators.crossover import ParameterCrossover
from operators.llm import LLMCrossover, LLMDiff, LLMMutation, LLMRepair, LLMSeed
from operators.llm_client import LLMClient, Reply
from operators.steering import LLMBudget, LLMSteering, ModelEnsemble

__all__ = ["Context", "LLMBudget", "LLMClient", "LLMCrossover", "LLMDiff", "LLMMutation", "LLMRepair",
           "LLMSeed", "LLMSteering", "ModelEnsemble", "Operator", "ParameterCrossover", "Proposal", "Reply",
           "TunableConstantMutation"]

"""Agent-side wrappers: the data model, the ``Policy`` protocol, prompt rendering, action parsing and rollout.

Nothing here imports torch: policies are implemented in ``r3l_learn`` and passed in.
"""

from wrappers.chat import ChatSequence, chat
from wrappers.collector import Collector
from wrappers.data import Sample, Trajectory, TrajectoryGroup, Turn, load_jsonl, save_jsonl
from wrappers.export import to_dataset
from wrappers.local_collector import LocalCollector
from wrappers.parsing import AnswerFormat, ParsedReply, parse_reply
from wrappers.policy import Generation, Policy, SamplingParams
from wrappers.prompts import FAMILIES, PromptTemplate, template_for
from wrappers.rollout import AgentEpisode, RolloutConfig, play, rollout, rollout_batch

__all__ = [
    # data model
    "Sample",
    "Trajectory",
    "TrajectoryGroup",
    "Turn",
    "load_jsonl",
    "save_jsonl",
    "to_dataset",
    # policy protocol
    "Generation",
    "Policy",
    "SamplingParams",
    # prompts and parsing
    "FAMILIES",
    "AnswerFormat",
    "ChatSequence",
    "chat",
    "ParsedReply",
    "PromptTemplate",
    "parse_reply",
    "template_for",
    # rollout
    "AgentEpisode",
    "RolloutConfig",
    "play",
    "rollout",
    "rollout_batch",
    # collection backend: where env episodes run
    "Collector",
    "LocalCollector",
]

# reflect-retry
from wrappers.oracle import OracleReflector
from wrappers.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats
from wrappers.reflection import PolicyReflector, Reflection, ReflectionRequest, Reflector, parse_reflection
from wrappers.structured_reflection import StructuredReflector

__all__ += [
    "OracleReflector",
    "PolicyReflector",
    "ReflectRetry",
    "ReflectRetryConfig",
    "Reflection",
    "ReflectionRequest",
    "Reflector",
    "StructuredReflector",
    "aggregate_stats",
    "parse_reflection",
]

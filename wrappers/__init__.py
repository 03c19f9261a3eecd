"""Agent-side wrappers: the data model, the ``Policy`` protocol, prompt rendering, action parsing and rollout.

Nothing here imports torch: policies are implemented in ``r3l_learn`` and passed in.
"""

from wrappers.chat import ChatSequence, chat
from wrappers.collectors.local import LocalCollector
from wrappers.collectors.protocol import Collector
from wrappers.data.export import to_dataset
from wrappers.data.trajectory import Sample, Trajectory, TrajectoryGroup, Turn, load_jsonl, save_jsonl
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
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats
from wrappers.retry.reflection import PolicyReflector, Reflection, ReflectionRequest, Reflector, parse_reflection
from wrappers.retry.structured_reflection import StructuredReflector

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

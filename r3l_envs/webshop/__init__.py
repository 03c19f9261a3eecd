"""WebShop (Yao et al., 2022) re-implemented for text agents: ``gym.make("r3l/WebShop-v0")``.

The catalogue (generated offline, or WebShop's own files) and its BM25 index are built once into the cache
folder and memory-mapped read-only by every env in every process; each env holds only its session.
"""

from r3l_envs.webshop.catalogue import Catalogue, open_catalogue
from r3l_envs.webshop.env import WebShopEnv
from r3l_envs.webshop.oracle import oracle_actions
from r3l_envs.webshop.reward import attribute_reward, option_reward, purchase_reward, type_reward

__all__ = [
    # the env
    "WebShopEnv",
    # the catalogue
    "Catalogue",
    "open_catalogue",
    # the reward
    "attribute_reward",
    "option_reward",
    "purchase_reward",
    "type_reward",
    # scripted shopper
    "oracle_actions",
]

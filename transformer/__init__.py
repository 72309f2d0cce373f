"""A readable Transformer built from scratch in PyTorch, trained with Lightning and Hydra."""
__version__ = "0.1.0"


def _register_config_resolvers() -> None:
    """``${corpus_name:<training file>,<default>}`` in configs: a user's corpus is named after
    its training file (``transformer.files.corpus_name``), so reports and run folders say which
    corpus they are about without a name typed by hand. ``${distilled:<data.distill_dir>}``:
    ``_distill`` when training on distilled targets, so those run folders stay apart."""
    from omegaconf import OmegaConf

    from transformer.files import corpus_name

    if not OmegaConf.has_resolver("corpus_name"):
        OmegaConf.register_new_resolver("corpus_name", corpus_name)
    if not OmegaConf.has_resolver("distilled"):
        OmegaConf.register_new_resolver("distilled", lambda distill_dir: "_distill" if distill_dir else "")


_register_config_resolvers()

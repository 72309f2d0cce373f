"""A readable Transformer built from scratch in PyTorch, trained with Lightning and Hydra."""
__version__ = "0.1.0"


def _register_config_resolvers() -> None:
    """``${corpus_name:<training file>,<default>}`` in configs: a user's corpus is named after
    its training file (``transformer.files.corpus_name``), so reports and run folders say which
    corpus they are about without a name typed by hand. ``${distilled:<data.distill_dir>}``:
    ``_distill`` when training on distilled targets, so those run folders stay apart.
    ``${feature_width:<data.n_mels>,<data.n_ceps>}``: a speech front end's input width, the
    features per frame (``transformer.data.speech.features.feature_width``)."""
    from omegaconf import OmegaConf

    from transformer.files import corpus_name

    if not OmegaConf.has_resolver("corpus_name"):
        OmegaConf.register_new_resolver("corpus_name", corpus_name)
    if not OmegaConf.has_resolver("distilled"):
        OmegaConf.register_new_resolver("distilled", lambda distill_dir: "_distill" if distill_dir else "")
    if not OmegaConf.has_resolver("feature_width"):
        OmegaConf.register_new_resolver("feature_width", _feature_width)


def _feature_width(n_mels, n_ceps=None) -> int:
    from transformer.data.speech.features import feature_width  # imported here: it loads torch

    return feature_width(n_mels, n_ceps)


_register_config_resolvers()

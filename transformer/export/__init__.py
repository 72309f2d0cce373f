"""Export trained checkpoints: to inference engines (CTranslate2 for translation) and back to
Hugging Face folders (``hf``)."""

from transformer.export.ctranslate2 import build_ctranslate2_spec, export_ctranslate2
from transformer.export.folder import ExportError
from transformer.export.hf import export_hf

__all__ = ["ExportError", "build_ctranslate2_spec", "export_ctranslate2", "export_hf"]

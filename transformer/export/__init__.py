"""Export trained checkpoints to inference engines (CTranslate2 for translation)."""

from transformer.export.ctranslate2 import ExportError, build_ctranslate2_spec, export_ctranslate2

__all__ = ["ExportError", "build_ctranslate2_spec", "export_ctranslate2"]

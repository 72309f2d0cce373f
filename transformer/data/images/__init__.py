"""Images: class folders of image files in, pixels out, from a user's folder or the digits preset.

``folder.py`` reads the ``<folder>/<class>/<file>`` layout (torchvision's ``ImageFolder``) and
one image with Pillow, or raises one :class:`ImageError` line naming the file or folder;
``digits.py`` writes scikit-learn's UCI digits as such a folder (the preset); ``datamodule.py``
carves the splits, batches the pixels and declares the input kind (``patches``). The model's
image front end is :class:`transformer.modules.frontends.PatchEmbedding`.

Needs the ``images`` extra (Pillow; scikit-learn for the digits preset).
"""

from transformer.data.images.folder import ImageError, ImageRow, check_image, load_image, read_folder

__all__ = ["ImageError", "ImageRow", "check_image", "load_image", "read_folder"]

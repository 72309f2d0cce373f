"""Front ends: an input kind's frames turned into ``d_model`` vectors and a padding mask.

Self-attention takes a set of vectors whatever made them; a front end is the only part that
knows the input kind. Token ids have their embedding (in the models); speech frames have
:class:`ConvSubsampling`; images have :class:`PatchEmbedding`; a graph's nodes have
:class:`NodeFeatures` (and :class:`LaplacianNodeFeatures`, which adds a positional encoding made
from the graph). What follows a front end (positions, layers, heads) is shared.

Shape legend: B batch, T input frames, T' = output frames (about T / 4), M mel bins per frame,
C conv channels (image channels for patches), D = d_model; H, W image height and width, P patch
side, N = (H / P)(W / P) patches; for graphs N nodes, F features per node, K Laplacian
eigenvectors.
"""

from __future__ import annotations

from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.ranges import Range

KERNEL, STRIDE = 3, 2
# Subsampling factor -> stride-2 convolutions.
SUBSAMPLING = {4: 2, 8: 3}


class ConvSubsampling(nn.Module):
    """3x3 stride-2 convolutions with ReLU over (time, mel), then a linear map to ``d_model``:
    ESPnet's ``Conv2dSubsampling`` (two convolutions, x4; Dong et al. 2018, Speech-Transformer) and
    ``Conv2dSubsampling8`` (three, x8), without their positional encoding, which the encoder adds.

    Subsampling time by 4 turns 100 frames a second into 25 vectors a second: attention over a
    minute of audio costs 16x less, and each vector still covers 40 ms. By 8, 12.5 vectors a
    second of 80 ms each: half the positions again, for inputs whose units are long (a spoken
    digit is about 400 ms) and a training budget that counts steps.

    No padding in the convolutions: output frame ``t`` sees input frames ``4t .. 4t+6`` only (x8:
    ``8t .. 8t+14``), so the ``T'`` valid outputs of an utterance depend on its own frames alone,
    never on the zeros padding it in a batch. Output length: ``T' = ((T - 1) // 2 - 1) // 2``
    (x4, 0 below 7 frames); x8 halves once more, ``(T' - 1) // 2`` (0 below 15 frames).

    Args:
        n_mels: features per input frame (M: mel bands, or their cepstra with ``data.n_ceps``).
        d_model: output width (D).
        channels: convolution channels (C); ``None`` is ``d_model``, as in ESPnet.
        subsampling: 4 or 8, the factor time (and the mel axis) shrinks by.

    Shapes:
        src ``(B, T, M)`` float, src_lengths ``(B,)`` long ->
        ``(B, T', D)`` vectors and ``src_pad_mask`` ``(B, T')`` bool (True = a real frame).
    """

    def __init__(self, n_mels: int, d_model: int, channels: int | None = None, subsampling: int = 4):
        super().__init__()
        if subsampling not in SUBSAMPLING:
            raise ValueError(f"ConvSubsampling subsamples by {' or '.join(map(str, SUBSAMPLING))}, got {subsampling}")
        channels = channels or d_model
        self.n_mels, self.d_model, self.n_convs = n_mels, d_model, SUBSAMPLING[subsampling]
        self.min_frames = 2 ** (self.n_convs + 1) - 1  # the shortest input with one output: 7 (x4), 15 (x8)
        layers: list[nn.Module] = [nn.Conv2d(1, channels, KERNEL, STRIDE), nn.ReLU()]
        for _ in range(self.n_convs - 1):
            layers += [nn.Conv2d(channels, channels, KERNEL, STRIDE), nn.ReLU()]
        self.conv = nn.Sequential(*layers)
        freq = self.output_lengths(torch.tensor(n_mels), self.n_convs).item()  # the mel axis shrinks as time does
        if freq < 1:
            raise ValueError(f"ConvSubsampling x{subsampling} needs n_mels >= {self.min_frames}, got {n_mels}")
        self.out = nn.Linear(channels * freq, d_model)

    @staticmethod
    def output_lengths(lengths: Tensor, n_convs: int = 2) -> Tensor:
        """Output frames for input lengths: each 3-wide stride-2 convolution maps ``L`` to
        ``(L - 1) // 2``; lengths under 7 give 0 (x4; under 15 with ``n_convs`` 3, x8)."""
        for _ in range(n_convs):
            lengths = torch.div(lengths - 1, STRIDE, rounding_mode="floor")
        return lengths.clamp(min=0)

    def lengths_out(self, lengths: Tensor) -> Tensor:
        """This front end's output frames for input lengths (:meth:`output_lengths` at its factor)."""
        return self.output_lengths(lengths, self.n_convs)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """Subsample frames into ``d_model`` vectors.

        Args:
            src: ``(B, T, M)`` features, zero-padded after each utterance's frames.
            src_lengths: ``(B,)`` real frames per utterance.

        Returns:
            ``(x, src_pad_mask)``: ``(B, T', D)`` and ``(B, T')`` bool, True where the output
            frame comes from real input frames only.
        """
        b, t, m = src.shape
        if m != self.n_mels:
            raise ValueError(f"ConvSubsampling expects {self.n_mels} features per frame, got {m}")
        if t < self.min_frames:
            raise ValueError(f"ConvSubsampling needs at least {self.min_frames} frames "
                             f"({10 * self.min_frames} ms at a 10 ms hop), got {t}")
        x = self.conv(src.unsqueeze(1))  # (B, T, M) -> (B, 1, T, M) -> (B, C, T', M')
        c, t_out, m_out = x.shape[1:]
        x = self.out(x.transpose(1, 2).reshape(b, t_out, c * m_out))  # (B, T', C, M') -> (B, T', C*M') -> (B, T', D)
        lengths = self.lengths_out(src_lengths.to(x.device))  # (B,)
        # Padding mask from lengths, in the convention of transformer/modules/attention.py:
        # True = a real position.
        src_pad_mask = torch.arange(t_out, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # (1, T') < (B, 1)
        return x, src_pad_mask


# ----------------------------------------------------------------------------- image patches
def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping ``P x P`` patches, each flattened to one vector, in
    row-major order of the patch grid (patch ``n`` is grid row ``n // (W / P)``, column
    ``n % (W / P)``): ``(B, C, H, W) -> (B, N, C·P·P)``; :func:`unpatchify` puts them back."""
    b, c, h, w = images.shape
    p = patch_size
    if h % p or w % p:
        raise ValueError(f"a {h}x{w} image does not divide into {p}x{p} patches")
    x = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, H/P, P, W/P, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # -> (B, H/P, W/P, C, P, P)
    return x.reshape(b, (h // p) * (w // p), c * p * p)  # -> (B, N, C·P·P)


def unpatchify(patches: Tensor, patch_size: int, height: int, width: int) -> Tensor:
    """The inverse of :func:`patchify`: ``(B, N, C·P·P) -> (B, C, H, W)``."""
    b, n, f = patches.shape
    p = patch_size
    rows, cols = height // p, width // p
    c = f // (p * p)
    x = patches.reshape(b, rows, cols, c, p, p)  # (B, H/P, W/P, C, P, P)
    x = x.permute(0, 3, 1, 4, 2, 5)  # -> (B, C, H/P, P, W/P, P)
    return x.reshape(b, c, height, width)  # -> (B, C, H, W)


class PatchEmbedding(nn.Module):
    """An image as a sequence of patch vectors (Dosovitskiy et al. 2021, "An image is worth 16x16
    words", sec. 3.1): non-overlapping ``P x P`` patches, each flattened and mapped by one linear
    layer to ``d_model``. The encoder then adds positions (a learned table, as ViT) and, with
    ``ClsPooling``, the class vector before the patches.

    With ``stride`` S below P the patches overlap (Xiao et al. 2021, "Early convolutions help
    transformers see better": a small image's ViT gains from the overlap): the grid is that of
    non-overlapping S x S cells, and each token reads the P x P patch centred on its cell, zeros
    beyond the image's edge (a convolution of kernel P, stride S, padding (P - S) / 2).

    Every image of a model has the same size, so every patch is real: the padding mask is all
    True. ``grid`` (rows, columns of patches) tells the encoder the 2-D layout a ``window``
    restricts attention to (``modules.attention.grid_window_mask``).

    Args:
        height, width: the image size in pixels (H, W), multiples of the stride.
        patch_size: the patch side P.
        d_model: output width (D).
        channels: image channels C (1 grey, 3 RGB).
        stride: the step S between patches, ``P - S`` even; ``None`` = P (non-overlapping).

    Shapes:
        src ``(B, C, H, W)`` float, src_lengths ignored -> ``(B, N, D)`` vectors and
        ``src_pad_mask`` ``(B, N)`` bool (all True).
    """

    def __init__(self, height: Annotated[int, Range(1, 2**16)], width: Annotated[int, Range(1, 2**16)],
                 patch_size: Annotated[int, Range(1, 2**16)], d_model: int,
                 channels: Annotated[int, Range(1, 4)] = 1, stride: int | None = None):
        super().__init__()
        stride = patch_size if stride is None else stride
        if stride > patch_size or (patch_size - stride) % 2:
            raise ValueError(f"PatchEmbedding: stride {stride} with {patch_size}x{patch_size} patches: the "
                             "stride is at most the patch side and differs from it by an even number")
        if height % stride or width % stride:
            raise ValueError(f"PatchEmbedding: a {height}x{width} image does not divide into "
                             f"{stride}x{stride} {'patches' if stride == patch_size else 'cells'}")
        self.height, self.width, self.patch_size, self.channels = height, width, patch_size, channels
        self.stride = stride
        self.grid = (height // stride, width // stride)
        self.proj = nn.Linear(channels * patch_size * patch_size, d_model)

    @property
    def n_patches(self) -> int:
        """N, the sequence length an image becomes."""
        return self.grid[0] * self.grid[1]

    def forward(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Embed images' patches.

        Args:
            src: ``(B, C, H, W)`` pixels.
            src_lengths: unused (every patch is real); taken as every front end takes it.

        Returns:
            ``(x, src_pad_mask)``: ``(B, N, D)`` and ``(B, N)`` bool, all True.
        """
        if tuple(src.shape[1:]) != (self.channels, self.height, self.width):
            raise ValueError(f"PatchEmbedding expects images of {self.channels}x{self.height}x{self.width} "
                             f"(channels x height x width), got {'x'.join(map(str, src.shape[1:]))}")
        if self.stride == self.patch_size:
            patches = patchify(src, self.patch_size)  # (B, N, C·P·P)
        else:  # overlapping: the same (C, P, P) order per patch, row-major over the grid
            patches = F.unfold(src, self.patch_size, padding=(self.patch_size - self.stride) // 2,
                               stride=self.stride).transpose(1, 2)  # (B, C·P·P, N) -> (B, N, C·P·P)
        x = self.proj(patches)  # (B, N, C·P·P) -> (B, N, D)
        return x, torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)  # (B, N)


def _lengths_mask(lengths: Tensor, t: int) -> Tensor:
    """``(B, T)`` bool, True for the first ``lengths[b]`` positions (a real node or frame)."""
    return torch.arange(t, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (1, T) < (B, 1)


class NodeFeatures(nn.Module):
    """A graph's nodes as vectors: each node's feature row through dropout and a linear map to
    ``d_model``. The nodes are a set, so the encoder adds no positions to them
    (``NoPositionalEncoding``); where they sit in the graph reaches attention as the adjacency
    mask (``modules.attention.adjacency_mask``) or as :class:`LaplacianNodeFeatures`.

    ``input_dropout`` drops feature entries before the map: on Cora's sparse bag-of-words
    features GAT uses 0.6 (Velickovic et al. 2018, sec. 3.3), and little labelled data needs it.
    ``bias=False`` makes the map GAT's ``W`` (a graph attention layer without projections of its
    own, ``AdditiveAttention(projections=False)``, adds its bias after attention). With
    ``dropout_groups`` G, each of G equal column blocks of the map (a head's ``W``) maps its own
    dropout draw of the features in training, as GAT's code drops its input once per head.

    Shapes: src ``(B, N, F)`` float, src_lengths ``(B,)`` long -> ``(B, N, D)`` and
    ``src_pad_mask (B, N)`` bool (True = a real node).
    """

    def __init__(self, d_model: int, n_features: int | None = None, input_dropout: float = 0.0, bias: bool = True,
                 dropout_groups: Annotated[int, Range(1, 2**16)] = 1):
        super().__init__()
        if n_features is None:
            raise ValueError("NodeFeatures: n_features is not set (the node classification task sets it from the data)")
        if d_model % dropout_groups:
            raise ValueError(f"dropout_groups={dropout_groups} must divide d_model={d_model}")
        self.n_features, self.dropout_groups = n_features, dropout_groups
        self.dropout = nn.Dropout(input_dropout)
        self.proj = nn.Linear(n_features, d_model, bias=bias)

    def _check(self, src: Tensor, width: int) -> None:
        if src.size(-1) != width:
            raise ValueError(f"{type(self).__name__} expects {width} values per node, got {src.size(-1)}")

    def drop(self, features: Tensor) -> Tensor:
        """Input dropout of ``(B, N, F)`` features. Bag-of-words rows are mostly zeros (Cora's
        are 1.3 % non-zero), which dropout leaves as they are: only the non-zero entries are
        drawn for, the same distribution as dropping every entry at a fraction of the draws."""
        if not self.training or self.dropout.p == 0:
            return features
        where = features.nonzero(as_tuple=True)  # 3 x (nnz,)
        return torch.zeros_like(features).index_put_(where, self.dropout(features[where]))

    def map(self, features: Tensor) -> Tensor:
        """Dropout and the linear map, ``(B, N, F)`` -> ``(B, N, D)``; a draw per column block with
        ``dropout_groups``."""
        g = self.dropout_groups
        if g == 1 or not self.training or self.dropout.p == 0:
            return self.proj(self.drop(features))
        biases = [None] * g if self.proj.bias is None else self.proj.bias.chunk(g)
        # G blocks of (D/G, F) weights, each on its own dropped features -> G x (B, N, D/G) -> (B, N, D)
        return torch.cat([F.linear(self.drop(features), w, b) for w, b in zip(self.proj.weight.chunk(g), biases)], -1)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        self._check(src, self.n_features)
        return self.map(src), _lengths_mask(src_lengths.to(src.device), src.size(1))


class LaplacianNodeFeatures(NodeFeatures):
    """:class:`NodeFeatures` plus a graph positional encoding: each node's entries in the ``K``
    eigenvectors of the graph's normalized Laplacian with the smallest eigenvalues, mapped
    linearly to ``d_model`` and added (Dwivedi & Bresson 2021, "A Generalization of Transformer
    Networks to Graphs"). With it, full attention still knows which nodes are near each other.

    An eigenvector's sign is arbitrary, so in training each graph's eigenvectors are flipped at
    random (their sec. 3.1): the model must not learn one sign.

    The data appends the eigenvectors to the features (``data.graphs``: ``laplacian_k``).

    Shapes: src ``(B, N, F + K)`` float, src_lengths ``(B,)`` -> ``(B, N, D)``, ``(B, N)`` bool.
    """

    def __init__(self, d_model: int, laplacian_k: int, n_features: int | None = None, input_dropout: float = 0.0,
                 bias: bool = True, dropout_groups: Annotated[int, Range(1, 2**16)] = 1):
        super().__init__(d_model, n_features, input_dropout, bias, dropout_groups)
        self.laplacian_k = laplacian_k
        self.position = nn.Linear(laplacian_k, d_model)

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor]:
        self._check(src, self.n_features + self.laplacian_k)
        features, eigvecs = src[..., : self.n_features], src[..., self.n_features:]  # (B, N, F), (B, N, K)
        if self.training:
            signs = torch.randint(0, 2, (src.size(0), 1, self.laplacian_k), device=src.device) * 2 - 1  # (B, 1, K)
            eigvecs = eigvecs * signs.to(eigvecs.dtype)
        x = self.map(features) + self.position(eigvecs)  # (B, N, D)
        return x, _lengths_mask(src_lengths.to(src.device), src.size(1))

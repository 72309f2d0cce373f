#!/usr/bin/env python3
"""Write Multi30k's English captions as pre-tokenized text (one sentence per line, words
separated by spaces, split the way UD English-GUM splits words, see ``transformer.data.words``):
unlabelled English for self-training a tagger.

    TRANSFORMER_DATA_MIRROR=../shared/datasets python3 scripts/multi30k_words.py \
        --split train --first 10000 --output runs/silver/m30k.words
    transformer-tag ckpt_path=[a.ckpt,b.ckpt,c.ckpt] input=runs/silver/m30k.words \
        format=conllu output=runs/silver/m30k.conllu      # silver tags from an ensemble
    transformer-train experiment=gum_upos_wsj data.extra_train=[runs/silver/m30k.conllu]
"""

from __future__ import annotations

import argparse
import sys

from transformer.data.words import write_caption_words


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", default="train", help="Multi30k split (train, val, test_2016_flickr, ...)")
    p.add_argument("--first", type=int, default=None, help="only the first N captions")
    p.add_argument("--output", required=True, help="the words file to write")
    p.add_argument("--data-dir", default="data/cache")
    p.add_argument("--mirror-root", default=None)
    args = p.parse_args(argv)
    lines = write_caption_words(args.split, args.output, args.first, args.data_dir, args.mirror_root)
    print(f"{args.output}: {len(lines)} lines, {sum(len(line.split()) for line in lines)} words", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

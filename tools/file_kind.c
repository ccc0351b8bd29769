/* SPDX-License-Identifier: MIT */
/* Non-safetensors inputs recognised by their magic bytes or file names (file_kind.h). */
#define _POSIX_C_SOURCE 200809L

#include "file_kind.h"

#include <dirent.h>
#include <string.h>

/* How to turn a PyTorch checkpoint into safetensors, once, in a Python the user trusts. */
#define CONVERT                                                                                    \
    "qsparse reads safetensors only and never unpickles (loading a pickle can run code). "      \
    "Convert it once, in a Python you trust: AutoModel.from_pretrained(DIR)"                      \
    ".save_pretrained(OUT) with transformers, or safetensors.torch.save_file(torch.load(FILE, "   \
    "weights_only=True), \"model.safetensors\")"

static int starts(const unsigned char *head, size_t n, const char *magic, size_t len)
{
    return n >= len && memcmp(head, magic, len) == 0;
}

const char *qs_file_kind_hint(const unsigned char *head, size_t n)
{
    if (starts(head, n, "PK\x03\x04", 4))
        return "a zip archive, as PyTorch saves a checkpoint (pytorch_model.bin, .pt, .pth), "
               "not safetensors. " CONVERT;
    /* pickle protocol 2..5 opens with PROTO <n>: torch.save's legacy format and plain pickles */
    if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
        return "a Python pickle (a legacy PyTorch checkpoint), not safetensors. " CONVERT;
    if (starts(head, n, "GGUF", 4))
        return "a GGUF file (llama.cpp's format, quantized already), not safetensors: quantize "
               "the original Hugging Face model (its *.safetensors) instead";
    if (starts(head, n, "\x89HDF\r\n\x1a\n", 8))
        return "an HDF5 file (Keras / TensorFlow tf_model.h5), not safetensors: load it with "
               "transformers (from_tf=True) and save_pretrained() it to get model.safetensors";
    if (starts(head, n, "\x93NUMPY", 6))
        return "a numpy .npy array, not safetensors: write it with safetensors.numpy.save_file";
    if (starts(head, n, "version https://git-lfs", 23))
        return "a Git LFS pointer, not the file itself: fetch the weights (git lfs pull, or "
               "download the model with huggingface_hub)";
    if (n >= 1 && head[0] == '{')
        return "a JSON file, not safetensors (for model.safetensors.index.json or config.json, "
               "pass the folder that holds them)";
    return NULL;
}

/* Whether name ends with suffix. */
static int ends(const char *name, const char *suffix)
{
    size_t a = strlen(name), b = strlen(suffix);
    return a >= b && strcmp(name + a - b, suffix) == 0;
}

const char *qs_folder_kind_hint(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    const char *hint = NULL;

    if (!d)
        return NULL;
    while (!hint && (e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "pytorch_model", 13) == 0 && (ends(s, ".bin") || ends(s, ".bin.index.json")))
            hint = "the folder holds PyTorch weights (pytorch_model*.bin) and no "
                   "model.safetensors. " CONVERT;
        else if (ends(s, ".pt") || ends(s, ".pth") || ends(s, ".ckpt"))
            hint = "the folder holds a PyTorch checkpoint (.pt / .pth / .ckpt) and no "
                   "model.safetensors. " CONVERT;
        else if (ends(s, ".gguf"))
            hint = "the folder holds a GGUF file (llama.cpp's format, quantized already) and no "
                   "model.safetensors: quantize the original Hugging Face model instead";
        else if (strcmp(s, "tf_model.h5") == 0 || strcmp(s, "flax_model.msgpack") == 0)
            hint = "the folder holds TensorFlow / Flax weights and no model.safetensors: load "
                   "them with transformers (from_tf=True / from_flax=True) and save_pretrained() "
                   "to get model.safetensors";
    }
    closedir(d);
    return hint;
}

// Image-folder reader: a labelled image dataset laid out the way people already keep one,
// one sub-folder per class (DIR/cat/001.png, DIR/dog/a.jpg). Classes are the sub-folder
// names sorted in byte order (so "B" < "a" < "b"), and a sample's label is its folder's
// index in that order: every site that has the same folders agrees on the labels. PNG and
// JPEG files are decoded with stb_image, converted to ImageFolderOptions::channels,
// stretched to height x width (no crop) and scaled to [0, 1], HWC per sample.
// Thread-safety: stateless; concurrent calls are safe (stb keeps its error per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

struct ImageFolderOptions {
  // Every image is resized to height x width. Default 28 x 28 (Fashion-MNIST's size).
  // Each must be in 1..4096.
  int height = 28;
  int width = 28;
  // 1: grey (stb's luma of RGB), 3: RGB. Default 1. An alpha channel is dropped.
  int channels = 1;
  // Most image files accepted in all classes together. Default 1,000,000. Listing stops
  // at the first file over it, so a huge folder costs no memory before it is refused.
  size_t max_files = 1'000'000;
  // Largest image accepted, in pixels (width x height as stored, before resizing).
  // Default 64 Mi pixels. Checked from the file's header before decoding, so a small file
  // that claims an enormous size is refused without allocating for it.
  int64_t max_pixels_per_image = 64 * 1024 * 1024;
};

// Reads every image under `dir`/<class>/ into a Dataset with sample_shape
// {height, width, channels}, num_classes = the number of class folders, int32 labels.
// Samples come class by class, and within a class in file-name byte order, so the result
// is a pure function of the folder's contents.
// Layout rules: class folders are the sub-folders directly under `dir`; files directly
// under `dir` are ignored. In a class folder, regular files ending in .png, .jpg or .jpeg
// (any case) are images; other files and sub-folders are ignored. Names starting with '.'
// (".DS_Store", ".git") are skipped everywhere.
// Errors, each naming the path concerned: NotFound (no `dir`); InvalidArgument (bad
// options, `dir` not a folder, no class folders, a class folder without images, more than
// max_files images, an image over max_pixels_per_image or over 2 GiB); Corruption (an
// empty, truncated or undecodable image; the message quotes stb's reason); IOError (the
// OS refused to list or read).
Result<Dataset> ReadImageFolder(const std::string& dir, const ImageFolderOptions& options);

}  // namespace fedmesh

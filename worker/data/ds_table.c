/* The data set formats by --data name: each is defined in its own
 * ds_NAME.c, and this table is the one place that lists them. A new
 * format is its file and its two lines here; --data's check and help and
 * dataset_open's message for an unknown name read the names from here. */
#include "worker/data/ds_format.h"

extern const dataset_format ds_idx_fashion_mnist, ds_idx_mnist; /* ds_idx.c */
extern const dataset_format ds_cifar10;                         /* ds_cifar10.c */
extern const dataset_format ds_synthetic;                       /* ds_synthetic.c */
extern const dataset_format ds_imagefolder;                     /* ds_imagefolder.c */

const dataset_format *const ds_formats[] = {
    &ds_idx_fashion_mnist,
    &ds_idx_mnist,
    &ds_cifar10,
    &ds_synthetic,
    &ds_imagefolder,
    NULL,
};

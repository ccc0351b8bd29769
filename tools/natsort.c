/* SPDX-License-Identifier: MIT */
/* Natural order of names (natsort.h). */
#include "natsort.h"

#include <string.h>

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

int qs_natural_cmp(const char *a, const char *b)
{
    const char *a0 = a, *b0 = b;

    while (*a && *b) {
        if (is_digit(*a) && is_digit(*b)) {
            const char *ea = a, *eb = b;
            size_t la, lb;
            while (*a == '0' && is_digit(a[1]))
                a++;
            while (*b == '0' && is_digit(b[1]))
                b++;
            for (ea = a; is_digit(*ea); ea++)
                ;
            for (eb = b; is_digit(*eb); eb++)
                ;
            la = (size_t)(ea - a);
            lb = (size_t)(eb - b);
            if (la != lb)
                return la < lb ? -1 : 1; /* more digits: a larger number */
            for (; a < ea; a++, b++)
                if (*a != *b)
                    return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            b = eb;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    if (*a || *b)
        return *a ? 1 : -1;
    return strcmp(a0, b0); /* "x01" and "x1": equal numbers, still two names */
}

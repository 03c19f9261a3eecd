"""The vocabulary of the generated catalogue: WebShop's five categories, their product types and option groups.

Each product type carries what a WebShop product record has: the search ``query`` it was listed under, the
``product_category`` breadcrumb (joined with ``›``), a pool of attributes in WebShop's style ("sulfate free",
"machine wash"), option groups with value pools (values are lowercase, as WebShop lowercases them), and a
price range in dollars.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATEGORIES", "OPTION_POOLS", "ProductType", "product_types"]

CATEGORIES = ("beauty", "electronics", "fashion", "food", "furniture")

#: Option values by option group. Groups never share a value, so ``click[value]`` names one option.
OPTION_POOLS: dict[str, tuple[str, ...]] = {
    "color": (
        "black", "white", "navy blue", "light grey", "red", "pink", "beige", "olive green", "burgundy", "brown",
        "sky blue", "purple", "yellow", "charcoal", "ivory", "teal", "coral", "silver", "rose gold", "khaki",
    ),
    "size": (
        "x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large", "5", "6", "7", "7.5", "8", "8.5",
        "9", "9.5", "10", "11", "12",
    ),
    "bed size": ("twin", "full", "queen", "king", "california king"),
    "dimensions": ("20x20 inch", "24x36 inch", "40x60 inch", "60x80 inch", "100x45x45cm", "120x60cm", "80x40cm"),
    "scent": ("lavender", "vanilla", "coconut", "unscented", "citrus", "eucalyptus", "rose", "sandalwood", "mint"),
    "size volume": ("1 fl oz", "2 fl oz", "4 fl oz", "8 fl oz", "16 fl oz", "32 fl oz", "3.4 ounce", "6.7 ounce"),
    "flavor name": (
        "original", "chocolate", "strawberry", "sea salt", "honey", "cinnamon", "peanut butter", "spicy",
        "barbecue", "mixed berry", "salted caramel", "garlic", "cheddar", "lemon",
    ),
    "item package quantity": ("1", "2", "3", "4", "6", "12"),
    "pack size": ("4 ounce (pack of 2)", "8 ounce (pack of 1)", "12 count (pack of 3)", "1 pound (pack of 1)",
                  "2 pound (pack of 2)", "24 count (pack of 1)", "6 ounce (pack of 6)"),
    "cable length": ("3 feet", "6 feet", "10 feet", "15 feet", "25 feet"),
    "capacity": ("32gb", "64gb", "128gb", "256gb", "512gb", "1tb", "2tb"),
    "style": ("modern", "classic", "rustic", "industrial", "mid-century", "bohemian", "minimalist", "farmhouse"),
    "material": ("cotton", "linen", "velvet", "faux leather", "polyester", "wool blend", "microfiber", "bamboo"),
    "pattern name": ("solid", "striped", "floral", "plaid", "geometric", "camouflage", "polka dot"),
    "connectivity": ("bluetooth", "usb-c", "wi-fi", "wired", "2.4ghz dongle"),
}


@dataclass(frozen=True)
class ProductType:
    """One kind of product: its title noun phrase, WebShop metadata, attributes, option groups, price range."""

    category: str
    name: str
    query: str
    path: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    price: tuple[float, float]


def _t(category: str, name: str, query: str, path: str, attributes: str, options: str, lo: float, hi: float):
    return ProductType(
        category=category,
        name=name,
        query=query,
        path=" › ".join(p.strip() for p in path.split(">")),
        attributes=tuple(a.strip() for a in attributes.split(",")),
        options=tuple(o.strip() for o in options.split(",") if o.strip()),
        price=(lo, hi),
    )


_BEAUTY = "Beauty & Personal Care"
_ELEC = "Electronics"
_FASHION = "Clothing, Shoes & Jewelry"
_FOOD = "Grocery & Gourmet Food"
_HOME = "Home & Kitchen"

# (category, title noun phrase, query, breadcrumb, attributes, option groups, price range)
_TYPES = (
    _t("beauty", "shampoo", "shampoo", f"{_BEAUTY} > Hair Care > Shampoo & Conditioner > Shampoos",
       "sulfate free, paraben free, natural ingredients, dry hair, hair growth, tea tree, argan oil, cruelty free",
       "scent, size volume", 6, 45),
    _t("beauty", "hair extensions", "hair extensions", f"{_BEAUTY} > Hair Care > Hair Extensions & Wigs",
       "natural looking, clip in, long lasting, easy to use, heat resistant, high quality, human hair",
       "color, size", 15, 120),
    _t("beauty", "face moisturizer", "face moisturizer", f"{_BEAUTY} > Skin Care > Face > Creams & Moisturizers",
       "hyaluronic acid, fragrance free, oil free, sensitive skin, anti aging, vitamin c, non greasy, dermatologist tested",
       "size volume", 8, 70),
    _t("beauty", "lipstick", "lipstick", f"{_BEAUTY} > Makeup > Lips > Lipstick",
       "long lasting, cruelty free, matte finish, paraben free, highly pigmented, moisturizing, vegan",
       "color", 5, 35),
    _t("beauty", "nail polish", "nail polish", f"{_BEAUTY} > Foot, Hand & Nail Care > Nail Polish",
       "quick dry, long lasting, non toxic, high gloss, chip resistant, easy apply",
       "color, item package quantity", 4, 25),
    _t("beauty", "body lotion", "body lotion", f"{_BEAUTY} > Skin Care > Body > Moisturizers > Lotions",
       "shea butter, dry skin, fast absorbing, natural ingredients, fragrance free, non greasy, coconut oil",
       "scent, size volume", 6, 40),
    _t("beauty", "makeup brush set", "makeup brushes", f"{_BEAUTY} > Tools & Accessories > Makeup Brushes & Tools",
       "synthetic hair, cruelty free, easy clean, travel size, high quality, soft bristles",
       "color, item package quantity", 8, 50),
    _t("beauty", "beard oil", "beard oil", f"{_BEAUTY} > Shave & Hair Removal > Men's > Beard & Mustache Care",
       "natural ingredients, argan oil, jojoba oil, beard growth, non greasy, travel size",
       "scent, size volume", 7, 35),
    _t("beauty", "eyeshadow palette", "eyeshadow palette", f"{_BEAUTY} > Makeup > Eyes > Eyeshadow",
       "highly pigmented, long lasting, cruelty free, easy blend, shimmer finish, vegan",
       "color", 8, 55),
    _t("beauty", "deodorant", "natural deodorant", f"{_BEAUTY} > Personal Care > Deodorants & Antiperspirants",
       "aluminum free, long lasting, sensitive skin, natural ingredients, baking soda free, cruelty free",
       "scent, item package quantity", 5, 30),
    _t("electronics", "wireless earbuds", "wireless earbuds", f"{_ELEC} > Headphones, Earbuds & Accessories > Earbuds",
       "noise cancelling, long battery life, water resistant, hands free, fast charging, stereo sound",
       "color, connectivity", 15, 180),
    _t("electronics", "usb microphone", "usb microphone", f"{_ELEC} > Computers & Accessories > Microphones",
       "noise cancelling, plug and play, high definition, easy to use, cardioid pattern, mute button",
       "color, connectivity", 20, 150),
    _t("electronics", "phone case", "phone case", f"{_ELEC} > Cell Phones & Accessories > Cases, Holsters & Sleeves",
       "shock absorbing, slim fit, wireless charging, scratch resistant, easy install, drop protection",
       "color, pattern name", 6, 40),
    _t("electronics", "portable charger", "power bank", f"{_ELEC} > Cell Phones & Accessories > Chargers & Power Adapters",
       "fast charging, high capacity, usb c, compact size, led display, travel size",
       "color, capacity", 12, 90),
    _t("electronics", "bluetooth speaker", "bluetooth speaker", f"{_ELEC} > Portable Audio & Video > Portable Speakers",
       "water resistant, long battery life, stereo sound, hands free, easy carry, deep bass",
       "color, connectivity", 18, 200),
    _t("electronics", "memory card", "micro sd card", f"{_ELEC} > Computers & Accessories > Memory Cards",
       "high speed, high capacity, water resistant, 4k video, shock proof",
       "capacity, item package quantity", 7, 80),
    _t("electronics", "hdmi cable", "hdmi cable", f"{_ELEC} > Television & Video > Accessories > Cables",
       "high speed, 4k ultra hd, gold plated, braided cord, ethernet support",
       "cable length, item package quantity", 5, 35),
    _t("electronics", "car subwoofer", "car subwoofer", f"{_ELEC} > Car & Vehicle Electronics > Car Audio > Subwoofers",
       "high power, deep bass, easy install, dual voice coil, low distortion",
       "dimensions, style", 60, 400),
    _t("electronics", "wireless mouse", "wireless mouse", f"{_ELEC} > Computers & Accessories > Mice",
       "ergonomic design, silent click, long battery life, plug and play, high precision",
       "color, connectivity", 9, 70),
    _t("electronics", "smart watch", "smart watch", f"{_ELEC} > Wearable Technology > Smartwatches",
       "heart rate, water resistant, sleep tracking, long battery life, touch screen, fitness tracker",
       "color, size", 30, 300),
    _t("fashion", "running shoes", "running shoes", f"{_FASHION} > Men > Shoes > Athletic > Running",
       "rubber sole, arch support, non slip, breathable mesh, lightweight design, memory foam",
       "color, size", 25, 160),
    _t("fashion", "mule shoes", "mule shoes", f"{_FASHION} > Women > Shoes > Mules & Clogs",
       "arch support, rubber sole, slip on, leather upper, cushioned insole",
       "color, size", 30, 140),
    _t("fashion", "t-shirt", "t shirt", f"{_FASHION} > Men > Clothing > Shirts > T-Shirts",
       "machine wash, short sleeve, cotton blend, classic fit, crew neck, moisture wicking",
       "color, size", 8, 40),
    _t("fashion", "dress", "summer dress", f"{_FASHION} > Women > Clothing > Dresses > Casual",
       "machine wash, hand wash, short sleeve, high waist, loose fit, button closure",
       "color, size", 18, 90),
    _t("fashion", "hoodie", "hoodie", f"{_FASHION} > Men > Clothing > Fashion Hoodies & Sweatshirts",
       "machine wash, long sleeve, drawstring closure, fleece lined, relaxed fit, front pocket",
       "color, size", 20, 75),
    _t("fashion", "jeans", "jeans", f"{_FASHION} > Women > Clothing > Jeans",
       "machine wash, high waist, stretch denim, slim fit, button closure, zipper fly",
       "color, size", 22, 95),
    _t("fashion", "sandals", "flat sandals", f"{_FASHION} > Women > Shoes > Sandals > Flats",
       "open toe, rubber sole, ankle strap, arch support, non slip, high knee",
       "color, size", 15, 70),
    _t("fashion", "backpack", "backpack", f"{_FASHION} > Luggage & Travel Gear > Backpacks",
       "water resistant, laptop compartment, padded straps, large capacity, anti theft",
       "color, pattern name", 20, 110),
    _t("fashion", "winter gloves", "winter gloves", f"{_FASHION} > Accessories > Gloves & Mittens",
       "touch screen, thermal lining, water resistant, windproof design, non slip grip",
       "color, size", 9, 45),
    _t("fashion", "swimsuit", "swimsuit", f"{_FASHION} > Women > Clothing > Swimsuits & Cover Ups",
       "tummy control, quick drying, adjustable straps, removable padding, hand wash",
       "color, size", 15, 60),
    _t("food", "bacon", "bacon", f"{_FOOD} > Meat & Seafood > Bacon",
       "gluten free, smoked peppered, sugar free, fully cooked, keto friendly, no nitrates",
       "flavor name, pack size", 6, 40),
    _t("food", "protein bars", "protein bars", f"{_FOOD} > Snacks & Sweets > Bars > Protein",
       "gluten free, high protein, low sugar, non gmo, keto friendly, plant based",
       "flavor name, pack size", 10, 50),
    _t("food", "herbal tea", "herbal tea", f"{_FOOD} > Beverages > Tea > Herbal",
       "caffeine free, usda organic, non gmo, individually wrapped, natural ingredients",
       "flavor name, item package quantity", 5, 35),
    _t("food", "coffee beans", "whole bean coffee", f"{_FOOD} > Beverages > Coffee > Whole Coffee Beans",
       "fair trade, usda organic, medium roast, dark roast, low acid, single origin",
       "flavor name, pack size", 9, 55),
    _t("food", "beef jerky", "beef jerky", f"{_FOOD} > Meat & Seafood > Jerky & Dried Meats",
       "high protein, gluten free, low fat, grass fed, no preservatives, ready to eat",
       "flavor name, pack size", 8, 45),
    _t("food", "potato chips", "potato chips", f"{_FOOD} > Snacks & Sweets > Chips & Crisps",
       "gluten free, kettle cooked, non gmo, low sodium, individually wrapped",
       "flavor name, pack size", 3, 30),
    _t("food", "olive oil", "extra virgin olive oil", f"{_FOOD} > Pantry Staples > Cooking Oils > Olive",
       "cold pressed, usda organic, non gmo, first cold press, single origin",
       "size volume, item package quantity", 8, 60),
    _t("food", "dark chocolate", "dark chocolate", f"{_FOOD} > Snacks & Sweets > Chocolate > Bars",
       "dairy free, fair trade, low sugar, non gmo, individually wrapped, plant based",
       "flavor name, pack size", 4, 40),
    _t("food", "granola", "granola", f"{_FOOD} > Breakfast Foods > Cereals > Granola",
       "gluten free, whole grain, high fiber, non gmo, low sugar, plant based",
       "flavor name, pack size", 5, 30),
    _t("food", "hot sauce", "hot sauce", f"{_FOOD} > Pantry Staples > Condiments > Hot Sauce",
       "gluten free, all natural, sugar free, keto friendly, small batch",
       "flavor name, item package quantity", 4, 30),
    _t("furniture", "ottoman bench", "ottoman bench", f"{_HOME} > Furniture > Living Room Furniture > Ottomans",
       "space saving, storage space, easy assemble, high density, solid wood",
       "color, dimensions", 35, 250),
    _t("furniture", "bedspread set", "bedspread", f"{_HOME} > Bedding > Quilts & Sets > Bedspreads",
       "machine washable, easy care, lightweight design, fade resistant, hypoallergenic",
       "color, bed size", 30, 160),
    _t("furniture", "office chair", "office chair", f"{_HOME} > Furniture > Home Office Furniture > Chairs",
       "lumbar support, height adjustable, easy assemble, breathable mesh, swivel base",
       "color, style", 50, 350),
    _t("furniture", "throw pillow covers", "throw pillow covers", f"{_HOME} > Home Décor > Decorative Pillows",
       "machine washable, hidden zipper, double sided, fade resistant, living room",
       "color, dimensions, material", 8, 45),
    _t("furniture", "coffee table", "coffee table", f"{_HOME} > Furniture > Living Room Furniture > Tables",
       "easy assemble, solid wood, storage space, living room, metal frame",
       "color, style", 45, 400),
    _t("furniture", "bookshelf", "bookshelf", f"{_HOME} > Furniture > Home Office Furniture > Bookcases",
       "easy assemble, space saving, storage space, heavy duty, engineered wood",
       "color, style", 40, 300),
    _t("furniture", "area rug", "area rug", f"{_HOME} > Home Décor > Area Rugs & Pads",
       "non slip, machine washable, stain resistant, living room, low pile",
       "color, dimensions, pattern name", 25, 260),
    _t("furniture", "floor lamp", "floor lamp", f"{_HOME} > Lighting & Ceiling Fans > Lamps > Floor Lamps",
       "energy efficient, living room, easy assemble, dimmable light, foot switch",
       "color, style", 30, 180),
    _t("furniture", "blackout curtains", "blackout curtains", f"{_HOME} > Home Décor > Window Treatments > Curtains",
       "thermal insulated, noise reducing, machine washable, living room, easy install",
       "color, dimensions", 15, 80),
    _t("furniture", "bed frame", "bed frame", f"{_HOME} > Furniture > Bedroom Furniture > Beds & Frames",
       "easy assemble, heavy duty, noise free, storage space, solid wood",
       "bed size, style", 90, 600),
)


def product_types() -> tuple[ProductType, ...]:
    """Every product type of the generated catalogue, ten per category."""
    return _TYPES


#: Brand names are built from these syllables (deterministically, per product).
BRAND_HEADS = ("zen", "aur", "vel", "kor", "lum", "nov", "tru", "sol", "mar", "pix", "bel", "dax", "fen", "orb",
               "qui", "ryn", "sky", "tal", "ura", "wix", "yor", "cal", "ember", "hal", "ivo", "jun", "kai", "lyr")
BRAND_TAILS = ("ora", "ex", "ix", "ly", "ique", "co", "wave", "nest", "line", "vo", "ra", "tek", "ana", "io",
               "mo", "field", "craft", "labs", "home", "wear")

#: Extra words titles carry after the type, by category (WebShop titles are long and keyword-stuffed).
TITLE_TAILS = {
    "beauty": ("for women and men", "salon quality", "travel friendly", "for all skin types", "gift set"),
    "electronics": ("compatible with iphone and android", "for home and office", "upgraded version",
                    "with carrying case", "2024 model"),
    "fashion": ("for women", "for men", "casual everyday wear", "for outdoor and travel", "gift for her"),
    "food": ("snack pack", "family size", "gourmet gift", "pantry staple", "resealable bag"),
    "furniture": ("for living room", "for bedroom", "for small spaces", "home decor", "for apartment"),
}
